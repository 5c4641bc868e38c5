# telsum.awk summarizes repeated BenchmarkPipelineTelemetry lines (go test -count N): for each
# corpus, the median, min and max over the runs of loss_%, allocs/op and on_allocs/req, beside
# the targets of issue 11 (loss at most 5% on the default corpus and 20% on the tiny one, at most
# 120 allocations per request).
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
/^BenchmarkPipelineTelemetry\// {
	name = $1; sub(/^BenchmarkPipelineTelemetry\//, "", name); sub(/-[0-9]+$/, "", name)
	if (!(name in runs)) order[++names] = name
	k = ++runs[name]
	for (i = 3; i < NF; i += 2) {
		if ($(i+1) == "loss_%") loss[name, k] = $i
		if ($(i+1) == "allocs/op") allocs[name, k] = $i
		if ($(i+1) == "on_allocs/req") onallocs[name, k] = $i
	}
}
function stat(m, name, label, target,    n, i, a, lo, hi) {
	n = runs[name]; lo = hi = m[name, 1]
	for (i = 1; i <= n; i++) { a[i] = m[name, i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
	printf "  %-14s median %8.2f  min %8.2f  max %8.2f  (%d runs)%s\n", label, median(a, n), lo, hi, n, target
}
END {
	if (names == 0) { print "telsum: no BenchmarkPipelineTelemetry lines" > "/dev/stderr"; exit 1 }
	for (j = 1; j <= names; j++) {
		name = order[j]
		print "telemetry cost, " name ":"
		stat(loss, name, "loss_%", name == "corpus=tiny" ? "  target <= 20" : "  target <= 5")
		stat(allocs, name, "allocs/op", "  target <= 120")
		stat(onallocs, name, "on_allocs/req", "")
	}
}

# telsum.awk summarizes repeated BenchmarkPipelineTelemetry lines (go test -count N): for each
# corpus, the median, min and max over the runs of loss_% (everything on against off, in process
# CPU per request), the allocations and bytes per request of each, their CPU and collector time
# per request, then the ablation: the loss and the allocations per request of each telemetry
# component on its own (loss_spans_%, spans_allocs/req and so on, and the A/A arm when the run
# had it). Figures, not targets: what users feel is the observer effect on latency
# (BenchmarkObserverEffect).
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
/^BenchmarkPipelineTelemetry\// {
	name = $1; sub(/^BenchmarkPipelineTelemetry\//, "", name); sub(/-[0-9]+$/, "", name)
	if (!(name in runs)) order[++names] = name
	k = ++runs[name]
	for (i = 3; i < NF; i += 2) {
		unit = $(i+1)
		if (unit == "loss_%" || unit == "allocs/op" || unit == "on_allocs/req" || unit ~ /^loss_.+_%$/ || unit ~ /^[a-z-]+_allocs\/req$/ || unit ~ /^(off|all)_(B|cpu_us|gc_us)\/req$/) {
			if (!((name, unit) in seen)) { seen[name, unit] = 1; units[name, ++nunits[name]] = unit }
			v[name, unit, k] = $i; nv[name, unit]++
		}
	}
}
function stat(name, unit, label, target,    n, i, a, lo, hi) {
	n = nv[name, unit]; if (n == 0) return
	lo = hi = v[name, unit, 1]
	for (i = 1; i <= n; i++) { a[i] = v[name, unit, i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
	printf "  %-22s median %8.2f  min %8.2f  max %8.2f  (%d runs)%s\n", label, median(a, n), lo, hi, n, target
}
END {
	if (names == 0) { print "telsum: no BenchmarkPipelineTelemetry lines" > "/dev/stderr"; exit 1 }
	nparts = split("spans metrics labels profiler aa", parts, " ")
	for (j = 1; j <= names; j++) {
		name = order[j]
		print "telemetry cost, " name ":"
		stat(name, "loss_%", "loss_%", "")
		stat(name, "allocs/op", "allocs/op", "")
		stat(name, "on_allocs/req", "on_allocs/req", "")
		stat(name, "off_allocs/req", "off_allocs/req", "")
		stat(name, "all_B/req", "all_B/req", "")
		stat(name, "off_B/req", "off_B/req", "")
		stat(name, "all_cpu_us/req", "all_cpu_us/req", "")
		stat(name, "off_cpu_us/req", "off_cpu_us/req", "")
		stat(name, "all_gc_us/req", "all_gc_us/req", "")
		stat(name, "off_gc_us/req", "off_gc_us/req", "")
		header = 0
		for (p = 1; p <= nparts; p++) {
			if (nv[name, "loss_" parts[p] "_%"] == 0) continue
			if (!header) { print "  ablation, each component on its own:"; header = 1 }
			stat(name, "loss_" parts[p] "_%", "loss_" parts[p] "_%", "")
			stat(name, parts[p] "_allocs/req", parts[p] "_allocs/req", "")
		}
	}
}

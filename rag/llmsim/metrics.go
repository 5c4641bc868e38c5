package llmsim

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram buckets as vLLM defines them (vllm/engine/metrics.py and its V1 successor), so
// that dashboards built for vLLM read the simulator unchanged.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics exports the engine under vLLM's metric names, all labelled model_name, and the
// simulated device memory under dcgm-exporter's name. Gauges and counters are read from Stats
// at scrape time; the latency histograms are observed by the engine loop on the engine clock
// (simulated seconds in virtual time).
type metrics struct {
	e *Engine

	running, waiting, gpuCache, kvCache  *prometheus.Desc
	preemptions, promptTokens, genTokens *prometheus.Desc
	success                              *prometheus.Desc
	prefixQueries, prefixHits            *prometheus.Desc
	fbUsed, power, energy                *prometheus.Desc

	ttft, tpot, e2e prometheus.Histogram
}

func newMetrics(e *Engine) *metrics {
	labels := prometheus.Labels{"model_name": e.prof.Model}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	return &metrics{
		e:            e,
		running:      desc("vllm:num_requests_running", "Number of requests currently running on GPU."),
		waiting:      desc("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		gpuCache:     desc("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."),
		kvCache:      desc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (vLLM V1 name)."),
		preemptions:  desc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		promptTokens: desc("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		genTokens:    desc("vllm:generation_tokens_total", "Number of generation tokens processed."),
		success:      desc("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason"),
		prefixQueries: desc("vllm:prefix_cache_queries_total",
			"Prefix cache queries, in terms of number of queried tokens."),
		prefixHits: desc("vllm:prefix_cache_hits_total",
			"Prefix cache hits, in terms of number of cached tokens."),
		// dcgm-exporter's name, unit and labels (gpu index, device, modelName), so that a
		// dashboard or `ragtail bench` reads the simulator's memory as a real GPU's.
		fbUsed: prometheus.NewDesc("DCGM_FI_DEV_FB_USED",
			"Framebuffer memory used (in MiB). Simulated: weights + activation reserve + KV-cache blocks in use.", nil,
			prometheus.Labels{"gpu": "0", "device": "nvidia0", "modelName": e.prof.GPU}),
		// dcgm-exporter's power (W) and energy since boot (mJ), from the profile's power model
		// (Profile.StepPower, Profile.Energy).
		power: prometheus.NewDesc("DCGM_FI_DEV_POWER_USAGE",
			"Power draw (in W). Simulated: idle power, plus the TDP's dynamic range while a step runs on the GPU.", nil,
			prometheus.Labels{"gpu": "0", "device": "nvidia0", "modelName": e.prof.GPU}),
		energy: prometheus.NewDesc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
			"Total energy consumption since boot (in mJ). Simulated from the power model since the engine started.", nil,
			prometheus.Labels{"gpu": "0", "device": "nvidia0", "modelName": e.prof.GPU}),
		ttft: hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		tpot: hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tpotBuckets),
		e2e:  hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2eBuckets),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.running, m.waiting, m.gpuCache, m.kvCache,
		m.preemptions, m.promptTokens, m.genTokens, m.success, m.prefixQueries, m.prefixHits, m.fbUsed} {
		ch <- d
	}
	if m.e.prof.TDPWatts > 0 {
		ch <- m.power
		ch <- m.energy
	}
	m.ttft.Describe(ch)
	m.tpot.Describe(ch)
	m.e2e.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.e.Stats()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(m.running, float64(st.Running))
	gauge(m.waiting, float64(st.Waiting))
	gauge(m.gpuCache, st.KVUsage)
	gauge(m.kvCache, st.KVUsage)
	counter(m.preemptions, float64(st.Preemptions))
	counter(m.promptTokens, float64(st.PromptTokens))
	counter(m.genTokens, float64(st.GenerationTokens))
	counter(m.prefixQueries, float64(st.PrefixCacheQueries))
	counter(m.prefixHits, float64(st.PrefixCacheHits))
	gauge(m.fbUsed, float64(st.MemoryUsedBytes/mib)) // whole MiB, as DCGM reports
	if m.e.prof.TDPWatts > 0 {
		gauge(m.power, st.PowerWatts)
		counter(m.energy, math.Floor(st.EnergyJoules*1000)) // whole mJ, as DCGM reports
	}
	// A text answer always runs to max_tokens; tool calls end at the model's end of turn, which
	// vLLM's engine counts as "stop" (its API layer reports them as finish_reason "tool_calls").
	// Every reason is exported from the start, as vLLM does, so that sums over reasons work.
	// Aborts count as in vLLM V1.
	counter(m.success, float64(st.Stopped), "stop")
	counter(m.success, float64(st.Finished-st.Stopped), "length")
	counter(m.success, float64(st.Aborted), "abort")
	m.ttft.Collect(ch)
	m.tpot.Collect(ch)
	m.e2e.Collect(ch)
}

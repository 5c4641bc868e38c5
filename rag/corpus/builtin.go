// Package corpus provides the documents the service retrieves from: a deterministic built-in
// corpus generated from a seed (thousands of chunks over many topics, with realistic chunk
// lengths and topic-specific vocabulary, so lexical similarity finds the right topic), and
// ingestion of a directory of Markdown and text files into chunks with overlap.
package corpus

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/ragtail/ragtail/rag"
)

// Options sizes the built-in corpus. Zero fields take the defaults.
type Options struct {
	Seed         uint64 // 0 means 1
	Docs         int    // documents; 0 means DefaultDocs
	ChunkTokens  int    // median chunk length in tokens; 0 means 220
	ChunksPerDoc int    // mean chunks per document; 0 means 6
}

// DefaultDocs is the number of documents of the default built-in corpus: with about six chunks
// each, some 3,600 chunks.
const DefaultDocs = 600

// topic is a subject with its own vocabulary. Chunks of one topic share its terms, so a question
// using them retrieves chunks of that topic.
type topic struct {
	name  string
	terms []string
}

// topics cover the subjects a RAG service over engineering documentation would hold.
var topics = []topic{
	{"KV cache", strs("kv cache block paged attention prefix eviction swap recompute preemption token sequence memory fragmentation allocator")},
	{"continuous batching", strs("batch scheduler iteration decode prefill chunked waiting running queue throughput slot admission step")},
	{"tail latency", strs("percentile p99 tail outlier jitter variance queueing histogram latency spike straggler hedging timeout")},
	{"vector search", strs("embedding vector cosine similarity nearest neighbour index hnsw quantization recall shard partition dimension")},
	{"caching", strs("cache hit miss lru eviction ttl warmup stampede penetration negative hot cold key invalidation")},
	{"bloom filters", strs("bloom filter hash false positive bit array membership guard rebuild capacity probe counting")},
	{"thread pools", strs("thread pool worker queue rejection saturation core maximum keepalive executor backpressure bounded burst")},
	{"load testing", strs("load generator open loop closed loop arrival poisson coordinated omission rate concurrency ramp soak")},
	{"distributed tracing", strs("trace span parent context propagation traceparent sampler exporter attribute event baggage collector")},
	{"profiling", strs("profile cpu sample flame graph stack heap allocation goroutine mutex contention label pprof")},
	{"metrics", strs("metric counter gauge histogram bucket exemplar scrape label cardinality rate quantile recording")},
	{"gpu memory", strs("gpu memory hbm bandwidth allocation fragmentation pool tensor weights activation stream kernel")},
	{"quantization", strs("quantization int4 int8 fp16 awq gptq calibration scale zero-point accuracy weights dequantize")},
	{"grpc", strs("grpc http2 stream keepalive ping channel connection window flow-control deadline metadata reconnect")},
	{"kubernetes", strs("pod node deployment replica autoscaler probe readiness liveness service ingress limit request")},
	{"databases", strs("transaction index query planner lock isolation replica write-ahead log vacuum partition table")},
	{"consensus", strs("raft leader follower election term log replication quorum commit snapshot heartbeat membership")},
	{"networking", strs("tcp packet congestion window retransmission latency bandwidth socket handshake mtu loss route")},
	{"storage", strs("disk ssd nvme iops throughput fsync page block filesystem compaction sstable write amplification")},
	{"message queues", strs("queue topic partition consumer producer offset lag broker acknowledgement retention dead-letter replay")},
	{"rate limiting", strs("token bucket leaky bucket quota burst limit throttle shed priority fairness window sliding")},
	{"service mesh", strs("sidecar proxy envoy retry circuit breaker outlier detection mtls routing weight canary")},
	{"observability", strs("log trace metric dashboard alert slo sli error budget signal correlation incident")},
	{"incident response", strs("incident pager on-call runbook mitigation rollback postmortem severity timeline escalation blameless")},
	{"transformers", strs("transformer attention head layer feed-forward residual normalization embedding positional rotary softmax")},
	{"tokenization", strs("tokenizer bpe vocabulary merge byte unicode subword token count special template")},
	{"prompt engineering", strs("prompt instruction context window system message few-shot template grounding citation hallucination")},
	{"retrieval augmented generation", strs("retrieval generation chunk context grounding rerank hybrid lexical dense citation relevance")},
	{"reranking", strs("reranker cross-encoder score relevance candidate list ndcg precision recall passage ordering")},
	{"document chunking", strs("chunk overlap split paragraph heading section boundary length window metadata ingestion")},
	{"speculative decoding", strs("draft model target verify acceptance tokens speculation lookahead tree parallel decoding speedup")},
	{"model serving", strs("inference server endpoint replica autoscaling warm cold start model loading batching gateway")},
	{"capacity planning", strs("capacity headroom forecast utilization saturation knee throughput demand growth budget peak")},
	{"garbage collection", strs("garbage collector heap pause mark sweep generation allocation rate pacer barrier finalizer")},
	{"async io", strs("async await event loop epoll future promise callback nonblocking reactor completion io_uring")},
	{"fault injection", strs("fault injection chaos latency abort error experiment blast radius hypothesis steady state")},
	{"user sessions", strs("session user journey step funnel checkout cart search click abandonment completion interruption")},
	{"security", strs("authentication authorization token secret tls certificate rotation audit least privilege policy")},
	{"compilers", strs("compiler parser lexer ast optimization inlining register allocation ssa codegen linker")},
	{"statistics", strs("distribution mean median variance confidence interval bootstrap pareto exponential lognormal estimator")},
}

// general words fill the sentences around the topic terms.
var (
	subjects = strings.Split("the system,the operator,the engineer,the service,the client,the benchmark,the team,the scheduler,the request path,the deployment", ",")
	verbs    = strs("controls limits measures increases reduces exposes stabilises amplifies hides reveals shapes bounds")
	linkers  = strings.Split("because,when,while,although,unless,so that,even if,as long as,whenever", ",")
	adjs     = strs("slow fast large small bounded unbounded noisy stable heavy light cold hot shared isolated")
)

var templates = []string{
	"In practice, %[1]s %[2]s the %[3]s of the %[4]s %[5]s.",
	"The %[4]s %[3]s %[2]s how %[1]s handles %[6]s %[5]s.",
	"%[9]s %[1]s %[2]s the %[3]s, the %[5]s becomes %[4]s %[8]s the %[6]s is %[7]s.",
	"A %[4]s %[3]s usually means the %[5]s and the %[6]s need attention.",
	"When the %[6]s grows, %[1]s should watch the %[3]s and the %[5]s.",
	"Engineers tune the %[3]s before the %[5]s, since a %[4]s %[6]s %[2]s everything downstream.",
	"The relation between %[3]s and %[5]s explains most %[7]s %[6]s behaviour.",
	"Measuring the %[3]s under a %[4]s %[6]s shows why the %[5]s matters.",
	"Every %[5]s carries a %[3]s, and %[1]s %[2]s it with a %[7]s %[6]s.",
	"Without a %[7]s %[5]s, the %[3]s %[2]s the %[6]s in ways that are hard to see.",
}

// Builtin generates the built-in corpus: deterministic for a given Options, with chunks of
// lognormally distributed length (median ChunkTokens, sigma 0.35: most chunks between half and
// double the median, as splitting real documents gives) about one topic each.
func Builtin(o Options) []rag.Chunk {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Docs <= 0 {
		o.Docs = DefaultDocs
	}
	if o.ChunkTokens <= 0 {
		o.ChunkTokens = 220
	}
	if o.ChunksPerDoc <= 0 {
		o.ChunksPerDoc = 6
	}
	r := rand.New(rand.NewPCG(o.Seed, 0xc0a905))
	chunks := make([]rag.Chunk, 0, o.Docs*o.ChunksPerDoc)
	for d := range o.Docs {
		t := topics[d%len(topics)]
		// A second topic lends some terms, as real documents touch neighbouring subjects.
		other := topics[r.IntN(len(topics))]
		docID := fmt.Sprintf("doc-%05d", d)
		title := fmt.Sprintf("%s: %s and %s", titleCase(t.name), pick(r, t.terms), pick(r, t.terms))
		n := 1 + r.IntN(2*o.ChunksPerDoc-1) // uniform on 1..2*mean-1: mean ChunksPerDoc
		for c := range n {
			target := int(float64(o.ChunkTokens) * math.Exp(0.35*r.NormFloat64()))
			target = max(40, min(target, 4*o.ChunkTokens))
			text := paragraph(r, t, other, target)
			chunks = append(chunks, rag.Chunk{
				ID: fmt.Sprintf("%s#%d", docID, c), DocID: docID, Title: title, Topic: t.name,
				Text: text, Tokens: rag.CountTokens(text),
			})
		}
	}
	return chunks
}

// paragraph writes sentences until the text has about target tokens.
func paragraph(r *rand.Rand, t, other topic, target int) string {
	var sb strings.Builder
	tokens := 0
	for tokens < target {
		term := func() string {
			if r.IntN(5) == 0 {
				return pick(r, other.terms)
			}
			return pick(r, t.terms)
		}
		s := fmt.Sprintf(templates[r.IntN(len(templates))],
			pick(r, subjects), pick(r, verbs), term(), pick(r, adjs), term(), term(), pick(r, adjs), pick(r, linkers),
			titleCase(pick(r, linkers)))
		s = fixSentence(s)
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(s)
		tokens += rag.CountTokens(s)
	}
	return sb.String()
}

// fixSentence capitalises the first letter.
func fixSentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Questions returns n questions about the corpus, each built from the terms of one chunk's topic
// and title, so that retrieval finds that topic. They are deterministic for a given seed.
func Questions(chunks []rag.Chunk, n int, seed uint64) []string {
	if len(chunks) == 0 || n <= 0 {
		return nil
	}
	byName := make(map[string]topic, len(topics))
	for _, t := range topics {
		byName[t.name] = t
	}
	forms := []string{
		"How does the %s affect the %s in %s?",
		"Why would %s and %s matter for %s?",
		"What limits the %s when the %s grows, in %s?",
		"Explain the trade-off between %s and %s for %s.",
		"When should I tune the %s before the %s in %s?",
	}
	r := rand.New(rand.NewPCG(seed, 0x9e57))
	out := make([]string, n)
	for i := range out {
		c := chunks[r.IntN(len(chunks))]
		words := rag.Words(strings.ToLower(c.Text))
		t, ok := byName[c.Topic]
		a, b := pick(r, words), pick(r, words)
		if ok {
			a, b = pick(r, t.terms), pick(r, t.terms)
		}
		out[i] = fmt.Sprintf(forms[r.IntN(len(forms))], a, b, strings.ToLower(c.Topic))
	}
	return out
}

// Topics lists the topic names of the built-in corpus.
func Topics() []string {
	out := make([]string, len(topics))
	for i, t := range topics {
		out[i] = t.name
	}
	return out
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

func strs(s string) []string { return strings.Fields(s) }

func titleCase(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

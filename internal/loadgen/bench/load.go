package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// Load is the part of a run's configuration that bench and sweep share (their common flags):
// the target, what each request sends, and the shape of the load. Its methods build the
// client, the workload and the report options it describes; their errors name the flags.
type Load struct {
	URL, Model, APIKey string
	MaxTokens          int
	Temperature        float64
	// SendTemperature sends Temperature (otherwise the server's default applies).
	SendTemperature bool
	// OverrideMaxTokens applies MaxTokens to every request, also to those whose dataset or
	// session step brings its own output length.
	OverrideMaxTokens bool
	Stream            bool
	Timeout           time.Duration  // per request, connecting included; 0: none
	ExtraBody         map[string]any // extra body fields
	Headers           Headers
	Seed              uint64
	// HTTPClient is the HTTP client for http:// targets: client.HTTPClientH1 or
	// client.HTTPClientNetHTTP ("" for the client's default, h1).
	HTTPClient string

	Shape      Shape   // arrival process, or the article's shaper
	Burstiness float64 // gamma shape of the gaps
	Dataset    Dataset // prompts: lengths, a file, key lookups or a trace
	Sessions   string  // a sessions JSONL file or "synthetic"
	Think      time.Duration
	// MultiTurn replays a dataset's conversations turn by turn as sessions, and makes every
	// chat step of a sessions file continue the conversation, each turn carrying the server's
	// actual answers to the turns before it.
	MultiTurn bool
	// EmbedBatch is the inputs of each request to an /embeddings URL: that many of the
	// dataset's prompts are embedded in one request (0 means 1).
	EmbedBatch int
	// Trace paces a trace dataset (Dataset mooncake:FILE, azure:FILE or burstgpt:FILE).
	Trace TraceOptions
	// Agent is an agent's live tool loop (--tool-latency, --tools).
	Agent AgentOptions

	Article shape.ArticleConfig
	Keys    KeyOptions

	DrainTimeout      time.Duration // 0: wait as long as it takes
	Warmup            int
	WarmupDuration    time.Duration
	MaxErrorRate      float64
	Goodput           stats.SLOs     // request SLOs of goodput; none: goodput is not reported
	Pricing           report.Pricing // the target's GPU cost, for the run's cost; zero: none
	PercentileMetrics []string       // report.AllMetrics when empty
	Percentiles       []float64      // report.DefaultPercentiles when empty
	SessionPatience   time.Duration
	Slice             time.Duration // width of the time slices summarised each on its own (bench --slice); 0: none
	Quiet             bool          // no progress line
	// Dashboard is the live view of the run (--dashboard).
	Dashboard DashboardOptions
}

// KeyOptions configure key lookups (Dataset keys[:FILE]).
type KeyOptions struct {
	Pattern       string
	Count, Hot    int
	Cold, Invalid float64
}

// Headers is a repeatable "Name: value" flag.
type Headers [][2]string

// String returns the headers as "Name: value, ...".
func (h *Headers) String() string {
	var parts []string
	for _, kv := range *h {
		parts = append(parts, kv[0]+": "+kv[1])
	}
	return strings.Join(parts, ", ")
}

// Set adds a header given as "Name: value".
func (h *Headers) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want \"Name: value\"", s)
	}
	*h = append(*h, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	return nil
}

// NewClient builds the HTTP client of o, asking the server for its model when none was given.
func (o *Load) NewClient(ctx context.Context, extra ...client.Option) (*client.Client, error) {
	opts := []client.Option{client.WithStream(o.Stream), client.WithTimeout(o.Timeout)}
	if o.HTTPClient != "" {
		opts = append(opts, client.WithHTTPClient(o.HTTPClient))
	}
	key := o.APIKey
	if key == "" {
		key = os.Getenv(o.apiKeyEnv())
	}
	if key != "" {
		opts = append(opts, client.WithAPIKey(key))
	}
	// The default applies to requests that bring no output length of their own (a dataset's or
	// a session step's), and to all of them when --max-tokens is given (see maxTokensOverride).
	opts = append(opts, client.WithMaxTokens(o.MaxTokens))
	if o.SendTemperature {
		opts = append(opts, client.WithTemperature(o.Temperature))
	}
	body, err := o.Agent.body(o.ExtraBody)
	if err != nil {
		return nil, err
	}
	if body != nil {
		opts = append(opts, client.WithBody(body))
	}
	for _, kv := range o.Headers {
		opts = append(opts, client.WithHeader(kv[0], kv[1]))
	}
	c, err := client.New(o.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	o.URL = c.URL()
	// An embeddings endpoint's model is not the chat model GET /v1/models lists first: without
	// --model the server's own applies.
	if o.Model == "" && !o.isKeyLookups() && !c.IsEmbeddings() {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		models, err := c.Models(lctx)
		cancel()
		var ue *url.Error
		switch {
		case errors.As(err, &ue) && !errors.Is(err, context.Canceled):
			return nil, fmt.Errorf("cannot reach %s: %w (is the server running, and is --url right?)", o.URL, ue.Err)
		case err != nil:
			return nil, fmt.Errorf("%w; pass --model", err)
		}
		if len(models) == 0 {
			return nil, errors.New("the server lists no models; pass --model")
		}
		o.Model = models[0]
	}
	if o.Model != "" {
		c, err = client.New(o.URL, append(append(opts, client.WithModel(o.Model)), extra...)...)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// isEmbeddings reports whether the target is an embeddings endpoint (a URL ending in
// /embeddings).
func (o *Load) isEmbeddings() bool {
	u, err := client.ResolveURL(o.URL)
	return err == nil && strings.HasSuffix(u.Path, "/embeddings")
}

func (o *Load) isKeyLookups() bool { return o.Dataset.Keys }

// drain is the drain timeout for loadgen.Config: --drain-timeout 0 waits as long as it takes.
func (o *Load) drain() time.Duration {
	if o.DrainTimeout == 0 {
		return -1
	}
	return o.DrainTimeout
}

// reportOptions are the report options of o.
func (o *Load) reportOptions() report.Options {
	return report.Options{Goodput: o.Goodput, Metrics: o.PercentileMetrics, Percentiles: o.Percentiles,
		SessionStepLimit: o.SessionPatience, Slice: o.Slice, Agent: o.Agent.On, Pricing: o.Pricing}
}

// sessionPatience is the step latency past which a replayed session's user leaves: the
// report's session step limit, or its goodput e2el SLO, as the summary counts interruptions.
func sessionPatience(ro report.Options) time.Duration {
	if ro.SessionStepLimit > 0 {
		return ro.SessionStepLimit
	}
	d, _ := ro.Goodput.Limit(stats.SLOE2EL)
	return d
}

// runInfo describes a run of plan p for the reports.
func (o *Load) runInfo(p plan, concurrency, numPrompts int) loadgen.RunInfo {
	var temperature *float64
	if o.SendTemperature {
		temperature = &o.Temperature
	}
	return loadgen.NewRunInfo(o.URL, o.Model, p.desc, p.rate, o.Seed).
		WithLimits(concurrency, numPrompts, o.MaxTokens).WithBurstiness(p.burstiness).
		WithRequests(o.Dataset.String(), o.Stream, temperature).WithProvenance(loadgen.BuildVersion(), os.Args)
}

// validate checks the flags bench and sweep share.
func (o *Load) validate() error {
	switch {
	case o.Warmup < 0:
		return errors.New("--warmup must not be negative")
	case o.WarmupDuration < 0:
		return errors.New("--warmup-duration must not be negative")
	case !(o.MaxErrorRate >= 0 && o.MaxErrorRate <= 1):
		return errors.New("--max-error-rate must be between 0 and 1")
	case o.EmbedBatch < 0 || o.EmbedBatch > shape.MaxEmbeddingBatch:
		return fmt.Errorf("--embed-batch must be between 1 and %d", shape.MaxEmbeddingBatch)
	case o.EmbedBatch > 1 && !o.isEmbeddings():
		return errors.New("--embed-batch applies to an embeddings endpoint: give an /embeddings --url (e.g. http://host:8080/v1/embeddings)")
	case o.HTTPClient != "" && !slices.Contains(client.HTTPClients, o.HTTPClient):
		return fmt.Errorf("--http-client %q: want %s", o.HTTPClient, strings.Join(client.HTTPClients, " or "))
	}
	if err := o.Agent.validate(); err != nil {
		return err
	}
	if err := o.Dashboard.validate(); err != nil {
		return err
	}
	if err := o.Pricing.Validate(); err != nil {
		return fmt.Errorf("--gpu-cost-per-hour, --gpus: %w", err)
	}
	if o.Pricing.GPUs > 0 && o.Pricing.USDPerGPUHour == 0 {
		o.Pricing.GPUs = 0 // --gpus alone prices nothing
	}
	if err := o.checkTargetAPI(); err != nil {
		return err
	}
	if _, ok := o.Goodput.Limit(stats.SLOAgent); ok && !o.Agent.On {
		return errors.New("--goodput agent:MS bounds an agent's conversations: run the tool loop with --tools or --tool-latency")
	}
	return o.checkCombinations()
}

// checkCombinations refuses options that do not go together.
func (o *Load) checkCombinations() error {
	trace, article := o.Dataset.Trace != "", o.Shape.Article
	switch {
	case o.MultiTurn && (trace || article || o.Sessions == "synthetic" || o.isKeyLookups()):
		return errors.New("--multi-turn replays conversations: give a ShareGPT or OpenAI-messages --dataset file, or --sessions FILE")
	case o.Agent.On && (o.isEmbeddings() || o.isKeyLookups()):
		return errors.New("--tool-latency and --tools run an agent's tool loop over chat completions: they do not combine with\nan /embeddings --url or key lookups")
	case o.isEmbeddings() && (trace || article || o.Sessions != "" || o.MultiTurn || o.isKeyLookups()):
		return errors.New("an /embeddings --url embeds the --dataset's prompts (synthetic lengths or a file): it does not combine with\n" +
			"--sessions, --multi-turn, --shape article, key lookups or a trace")
	case trace && o.Sessions != "":
		return fmt.Errorf("--dataset %s: a trace replays its own requests: it does not combine with --sessions", o.Dataset)
	case article && o.Sessions != "":
		return errors.New("--shape article makes its own prompts: it does not combine with --sessions")
	}
	return nil
}

package pipeline

// Defaults for backends that do not implement the optional interfaces.
const (
	DefaultProviderName = "ragtail"
	DefaultDBSystem     = "ragtail.memory"
	defaultModelName    = "unknown"
)

// OtherModel is the gen_ai.request.model metric label of every request for a model the
// generator does not serve, so that the label's values stay bounded by the served models plus
// one, whatever clients send.
const OtherModel = "_OTHER"

package bench

import (
	"errors"
	"strings"

	"github.com/ragtail/ragtail/loadgen/client"
)

// targetAPI is the generation API --url names (see client.ResolveURL): an Anthropic Messages
// URL ends in /messages, an OpenAI Responses one in /responses; "" for chat completions and
// the others, or a URL that does not parse (validated elsewhere).
func (o *Load) targetAPI() string {
	u, err := client.ResolveURL(o.URL)
	if err != nil {
		return ""
	}
	switch p := strings.TrimSuffix(u.Path, "/"); {
	case strings.HasSuffix(p, "/messages"):
		return client.APIMessages
	case strings.HasSuffix(p, "/responses"):
		return client.APIResponses
	}
	return ""
}

// apiKeyEnv is the environment variable the API key defaults to: $ANTHROPIC_API_KEY for a
// Messages --url, $OPENAI_API_KEY for the others.
func (o *Load) apiKeyEnv() string {
	if o.targetAPI() == client.APIMessages {
		return "ANTHROPIC_API_KEY"
	}
	return "OPENAI_API_KEY"
}

// checkTargetAPI refuses what a Messages or Responses --url cannot run: the agent's tool loop
// offers its tools in chat completions' form.
func (o *Load) checkTargetAPI() error {
	if o.targetAPI() != "" && o.Agent.On {
		return errors.New("--tool-latency and --tools run an agent's tool loop over chat completions: they do not combine with\na /messages or /responses --url")
	}
	return nil
}

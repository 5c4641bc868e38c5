package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	wire "github.com/ragtail/ragtail/rag/openai"
)

// StatusError is an HTTP error answer of the LLM server. It matches the rag sentinel its status
// maps to: 404 naming a model rag.ErrUnknownModel; 400, 413 and 422 rag.ErrInvalidRequest (the
// server rejected the request, e.g. a prompt over its context length); 408 and 504
// rag.ErrTimeout; anything else, including 401/403 (a configuration problem, not the user's),
// rag.ErrUnavailable.
type StatusError struct {
	Status     int
	Message    string        // the server's error message, or the start of its body
	RetryAfter time.Duration // from a Retry-After header in seconds; 0 if none
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("llm server answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (check the API key)"
	case http.StatusNotFound:
		if !mentionsModel(e.Message) {
			msg += " (is the URL the server's OpenAI base URL, ending in /v1?)"
		}
	}
	return msg
}

// Unwrap returns the rag sentinel the status maps to.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case http.StatusNotFound:
		if mentionsModel(e.Message) {
			return rag.ErrUnknownModel
		}
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return rag.ErrInvalidRequest
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return rag.ErrTimeout
	}
	return rag.ErrUnavailable
}

// retryable reports whether a request that got this answer may be sent again.
func (e *StatusError) retryable() bool {
	switch e.Status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func mentionsModel(msg string) bool { return strings.Contains(strings.ToLower(msg), "model") }

// readStatusError reads an error answer (rag/openai.ReadError), its message cut to 300 bytes.
func readStatusError(resp *http.Response) *StatusError {
	a := wire.ReadError(resp, maxMessageLen)
	return &StatusError{Status: a.Status, Message: a.Message, RetryAfter: a.RetryAfter}
}

// serverMessage extracts an error message from the bodies OpenAI-compatible servers send
// (rag/openai.ServerMessage), cut to 300 bytes.
func serverMessage(body []byte) string { return wire.ServerMessage(body, maxMessageLen) }

// maxMessageLen bounds a server's error message in an error.
const maxMessageLen = 300

func truncate(s string) string { return wire.Truncate(s, maxMessageLen) }

// requestError describes the failure of a request that got no usable answer: the context ended
// (the caller's, or one of the client's timeouts), the server answered with an error status, or
// the connection failed.
func (c *Client) requestError(ctx context.Context, what string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		switch {
		case errors.Is(cause, errFirstToken):
			c.firstTokenTimeouts.Add(1)
			return fmt.Errorf("%s: %w: no answer from %s within %v", what, rag.ErrTimeout, c.baseURL, c.cfg.firstTokenTimeout)
		case errors.Is(cause, context.DeadlineExceeded):
			return fmt.Errorf("%s: %w (%w)", what, rag.ErrTimeout, cause)
		default:
			return fmt.Errorf("%s: %w", what, cause)
		}
	}
	var se *StatusError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", what, se)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: %w: could not connect to %s within %v: %w", what, rag.ErrUnavailable, c.baseURL, c.cfg.connectTimeout, err)
	}
	return fmt.Errorf("%s: %w: %s: %w", what, rag.ErrUnavailable, c.baseURL, err)
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runHealthcheck probes a URL and succeeds on a 2xx answer. The container image is distroless
// (no shell, no curl), so compose healthchecks run the binary itself:
// ["CMD", "ragtail", "healthcheck", "http://127.0.0.1:8080/readyz"].
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("healthcheck", "URL", `Probes URL with GET and exits 0 if it answers 2xx, 1 otherwise (printing why). Meant for
container healthchecks, where the image has no shell or curl, e.g. /readyz of ragtail serve or
/health of ragtail llm-sim.`)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	urls, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(urls) != 1 || !strings.HasPrefix(urls[0], "http") {
		fmt.Fprintln(stderr, "ragtail healthcheck: want exactly one http(s) URL")
		fs.Usage()
		return errUsage
	}
	target := urls[0]
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("healthcheck %s: HTTP %d: %s", target, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

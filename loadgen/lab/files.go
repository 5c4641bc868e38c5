package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// WriteFiles writes results as the ragtail.lab/v1 JSON document (one object for one result, an
// array for several) to jsonPath and as a self-contained HTML page to htmlPath; an empty path
// skips that file.
func WriteFiles(results []*Result, jsonPath, htmlPath string) error {
	var errs []error
	if jsonPath != "" {
		var v any = results
		if len(results) == 1 {
			v = results[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", jsonPath, err))
		}
	}
	if htmlPath != "" {
		f, err := os.Create(htmlPath)
		if err == nil {
			err = errors.Join(WriteHTML(f, results), f.Close())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", htmlPath, err))
		}
	}
	return errors.Join(errs...)
}

// NamesList is Names joined for a usage line: "p99-model, coupling, ...".
func NamesList() string { return strings.Join(Names(), ", ") }

// WaitReady polls GET base/readyz until the service answers 200 (a Qdrant-backed service is
// ready once it has loaded its doc store), for at most timeout.
func WaitReady(ctx context.Context, base string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service at %s not ready: %w", base, ctx.Err())
		case <-tick.C:
		}
	}
}

// Expand returns the experiments name stands for: every one for "all", else name itself.
func Expand(name string) ([]string, error) {
	if name == "all" {
		return Names(), nil
	}
	if DefaultDuration(name) == 0 {
		return nil, fmt.Errorf("%w %q: want one of %s, or all", ErrUnknownExperiment, name, NamesList())
	}
	return []string{name}, nil
}

// RunNames runs the experiments called names in order against t, writing each one's table to w
// as it ends (and its start to o.Log) and, after several, the summary table. It returns the
// results of those that ran, with the first error.
func RunNames(ctx context.Context, names []string, t Target, o Options, w io.Writer) ([]*Result, error) {
	var results []*Result
	for _, name := range names {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "lab %s: running (%v of load)\n", name, LoadDuration(name, o))
		}
		res, err := Run(ctx, name, t, o)
		if err != nil {
			return results, err
		}
		results = append(results, res)
		if err := WriteText(w, res); err != nil {
			return results, err
		}
	}
	if len(results) > 1 {
		return results, WriteSummary(w, results)
	}
	return results, nil
}

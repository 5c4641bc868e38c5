package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/openai"
)

// TestErrorsEchoBoundedValues sends chat requests whose bad field is 900 KB long: each 400
// quotes at most a bounded part of it (one came back whole, 900 KB).
func TestErrorsEchoBoundedValues(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	big := strings.Repeat("A", 900<<10)
	digits := "1" + strings.Repeat("0", 900<<10)
	msgs := `"messages":[{"role":"user","content":"x"}]`
	tests := []struct{ name, body string }{
		{"content part type", `{"model":"` + s.model + `","messages":[{"role":"user","content":[{"type":"` + big + `"}]}]}`},
		{"number of the wrong type", `{"model":"` + s.model + `",` + msgs + `,"seed":` + digits + `}`},
		{"temperature of the wrong type", `{"model":"` + s.model + `",` + msgs + `,"temperature":"` + big + `"}`},
		{"role", `{"model":"` + s.model + `","messages":[{"role":"` + big + `","content":"x"}]}`},
		{"model", `{"model":"` + big + `",` + msgs + `}`},
		{"coupling", `{"model":"` + s.model + `",` + msgs + `,"rag":{"coupling":"` + big + `"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d: %.200s", resp.StatusCode, body)
			}
			if len(body) > openai.MaxErrorMessage+256 {
				t.Errorf("the error is %d bytes: %.200s", len(body), body)
			}
		})
	}
}

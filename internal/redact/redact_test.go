package redact_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/internal/redact"
)

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"postgres password", "postgres://app:s3cret@db/rag", "postgres://app:xxxxx@db/rag"},
		{"redis password without a user", "redis://:pw@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"user without a password", "redis://app@redis:6379/0", "redis://app@redis:6379/0"},
		{"no userinfo, @ in the query", "http://host:8080/v1?user=me@example.com", "http://host:8080/v1?user=me@example.com"},
		{"@ in the password", "postgres://app:p%40ss@db/rag", "postgres://app:xxxxx@db/rag"},
		{"URL in a sentence", `connect "postgres://app:s3cret@db:5432/rag": refused`, `connect "postgres://app:xxxxx@db:5432/rag": refused`},
		{"URL without a path", "dial redis://:pw@redis:6379 failed", "dial redis://:xxxxx@redis:6379 failed"},
		{"two URLs in one argument", "--urls=http://a:p1@h1,http://b:p2@h2/x", "--urls=http://a:xxxxx@h1,http://b:xxxxx@h2/x"},
		{"query api_key", "https://h/v1?api_key=sk-1&model=m", "https://h/v1?api_key=xxxxx&model=m"},
		{"query names any case", "https://h/?Token=a&PASSWORD=b&apiKey=c&x=1", "https://h/?Token=xxxxx&PASSWORD=xxxxx&apiKey=xxxxx&x=1"},
		{"access token in a fragment", "https://h/cb#access_token=abc&state=1", "https://h/cb#access_token=xxxxx&state=1"},
		{"presigned URL", "https://b.s3/o?X-Amz-Credential=AK%2F2024&X-Amz-Date=20240101&X-Amz-Signature=ab12",
			"https://b.s3/o?X-Amz-Credential=xxxxx&X-Amz-Date=20240101&X-Amz-Signature=xxxxx"},
		{"SAS signature", "https://a.blob/c?sv=2022&sig=abc%3D", "https://a.blob/c?sv=2022&sig=xxxxx"},
		{"password and query password", "postgres://app:a@db/rag?sslpassword=b", "postgres://app:xxxxx@db/rag?sslpassword=xxxxx"},
		{"key/value connection string", "host=db user=app password=s3cret dbname=rag", "host=db user=app password=xxxxx dbname=rag"},
		{"quoted connection string value", `host=db password='a b\'c' sslmode=disable`, "host=db password=xxxxx sslmode=disable"},
		{"flag with =", "--api-key=sk-1", "--api-key=xxxxx"},
		{"counts of tokens are no secret", "--max-tokens=64 max_tokens=64 --max-tokens-cap=9", "--max-tokens=64 max_tokens=64 --max-tokens-cap=9"},
		{"the last word decides", "--key-count=5 --token-budget=3 --api-key-id=7", "--key-count=5 --token-budget=3 --api-key-id=7"},
		{"not a pair", "a==b x=1 1+1=2", "a==b x=1 1+1=2"},
		{"value runs to the end", "token=", "token="},
		{"nothing to hide", "ragtail serving on :8080", "ragtail serving on :8080"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := redact.String(tt.in); got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStringAllocatesNothingWithoutCandidates(t *testing.T) {
	s := "ragtail serving the API on http-ish host 127.0.0.1:8080"
	if n := testing.AllocsPerRun(100, func() { _ = redact.String(s) }); n != 0 {
		t.Errorf("%v allocations for a string with neither :// nor =", n)
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "nothing secret", in: []string{"ragtail", "serve", "--addr", ":8080", "--top-k=5", "--max-tokens", "64"},
			want: []string{"ragtail", "serve", "--addr", ":8080", "--top-k=5", "--max-tokens", "64"}},
		{name: "the issue's serve", in: []string{"ragtail", "serve", "--docstore", "postgres://app:s3cret@db/rag", "--cache", "redis://:pw@redis:6379/0"},
			want: []string{"ragtail", "serve", "--docstore", "postgres://app:xxxxx@db/rag", "--cache", "redis://:xxxxx@redis:6379/0"}},
		{name: "URL after =", in: []string{"ragtail", "serve", "--docstore=postgres://app:s3cret@db/rag"},
			want: []string{"ragtail", "serve", "--docstore=postgres://app:xxxxx@db/rag"}},
		{name: "llm key with =", in: []string{"ragtail", "serve", "--llm-api-key=sk-live-1"}, want: []string{"ragtail", "serve", "--llm-api-key=xxxxx"}},
		{name: "llm key as next argument", in: []string{"ragtail", "serve", "--llm-api-key", "sk-live-1", "--addr", ":1"},
			want: []string{"ragtail", "serve", "--llm-api-key", "xxxxx", "--addr", ":1"}},
		{name: "single dash", in: []string{"ragtail", "serve", "-embed-api-key", "e-1", "-qdrant-api-key=q-1"},
			want: []string{"ragtail", "serve", "-embed-api-key", "xxxxx", "-qdrant-api-key=xxxxx"}},
		{name: "any key token password secret", in: []string{"x", "--Admin-Token", "t", "--db-password=p", "--client-secret", "s", "--tls-key", "k", "--server-metrics-token", "m"},
			want: []string{"x", "--Admin-Token", "xxxxx", "--db-password=xxxxx", "--client-secret", "xxxxx", "--tls-key", "xxxxx", "--server-metrics-token", "xxxxx"}},
		{name: "value that looks like a flag", in: []string{"x", "--llm-api-key", "--dashed-secret"}, want: []string{"x", "--llm-api-key", "xxxxx"}},
		{name: "secret flag last", in: []string{"x", "--llm-api-key"}, want: []string{"x", "--llm-api-key"}},
		{name: "empty value", in: []string{"x", "--api-key="}, want: []string{"x", "--api-key="}},
		{name: "header keeps its name", in: []string{"ragtail", "bench", "--header", "Authorization: Bearer sk-1", "-H=X-Api-Key: k", "-H", "novalue"},
			want: []string{"ragtail", "bench", "--header", "Authorization: xxxxx", "-H=X-Api-Key: xxxxx", "-H", "xxxxx"}},
		{name: "flags stop at --, URLs do not", in: []string{"x", "--", "--llm-api-key", "v", "http://u:p@h/"},
			want: []string{"x", "--", "--llm-api-key", "v", "http://u:xxxxx@h/"}},
		{name: "program name kept", in: []string{"/tmp/secret-keys/ragtail", "version"}, want: []string{"/tmp/secret-keys/ragtail", "version"}},
		{name: "URL in a bench target", in: []string{"ragtail", "bench", "--url", "http://h:8000/v1?api_key=sk-9"},
			want: []string{"ragtail", "bench", "--url", "http://h:8000/v1?api_key=xxxxx"}},
		{name: "none", in: nil, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tt.in)
			if got := redact.Args(in); !slices.Equal(got, tt.want) {
				t.Errorf("Args(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("Args changed its argument to %q", in)
			}
		})
	}
}

func TestSecretName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"api-key", "api_key", "apiKey", "X-Api-Key", "key", "token", "access_token", "sessionToken",
		"password", "sslpassword", "PASSWD", "passphrase", "client_secret", "X-Amz-Credential", "X-Amz-Signature", "sig", "pwd",
		"pass", "auth", "Authorization", "--admin-token", "-qdrant-api-key"} {
		if !redact.SecretName(name) {
			t.Errorf("SecretName(%q) = false", name)
		}
	}
	for _, name := range []string{"max-tokens", "max_tokens", "reasoning-tokens", "max-tokens-cap", "key-count", "hot-keys", "token-budget",
		"api-key-id", "url", "docstore", "cache", "header", "model", "top_k", ""} {
		if redact.SecretName(name) {
			t.Errorf("SecretName(%q) = true", name)
		}
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(&buf, nil))).With("cache", "redis://:pw1@redis:6379/0")
	logger.Info("connect postgres://app:pw2@db/rag",
		"url", "http://u:pw3@llm:8000/v1",
		"err", errors.New("dial postgres://app:pw4@db/rag: refused"),
		"exporting", []string{"otlp traces to http://u:pw5@collector:4318"},
		"api_key", "pw6",
		slog.Group("backend", "dsn", "host=db password=pw7"),
		"target", &url.URL{Scheme: "http", User: url.UserPassword("u", "pw8"), Host: "h"},
		"count", 3)
	out := buf.String()
	for _, secret := range []string{"pw1", "pw2", "pw3", "pw4", "pw5", "pw6", "pw7", "pw8"} {
		if strings.Contains(out, secret) {
			t.Errorf("log line shows %s: %s", secret, out)
		}
	}
	for _, want := range []string{"redis://:xxxxx@redis", "postgres://app:xxxxx@db/rag", "http://u:xxxxx@llm:8000/v1", "api_key=xxxxx",
		"backend.dsn=\"host=db password=xxxxx\"", "count=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %q: %s", want, out)
		}
	}
}

// FuzzRedact puts an arbitrary secret in every place the rules cover, on a command line and in
// a sentence, and checks that it does not survive, in the form it was written in (a URL's
// password and a query value escaped): it may show only where the redacted line shows it
// anyway, as when the secret is "xxxxx" or "postgres".
func FuzzRedact(f *testing.F) {
	for _, seed := range []string{"s3cret", "p@ss/w?rd#1", "a b'c", "xxxxx", "token=x&", "--api-key", "é\x00\n", "postgres"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		if secret == "" {
			return
		}
		userinfo := url.UserPassword("app", secret).String()
		inURL := strings.TrimPrefix(userinfo, "app:")
		inQuery := url.QueryEscape(secret)
		type place struct {
			args []string
			at   int    // the argument that held the secret
			form string // the secret as written there
			want string // the argument redacted
			bare bool   // a value only Args can tell: a flag's next argument, or one with a space or &
		}
		places := []place{
			{[]string{"ragtail", "serve", "--docstore", "postgres://" + userinfo + "@db/rag"}, 3, inURL, "postgres://app:xxxxx@db/rag", false},
			{[]string{"ragtail", "serve", "--cache=redis://:" + inURL + "@redis:6379/0"}, 2, inURL, "--cache=redis://:xxxxx@redis:6379/0", false},
			{[]string{"ragtail", "bench", "--url", "http://h:8000/v1?model=m&api_key=" + inQuery}, 3, inQuery, "http://h:8000/v1?model=m&api_key=xxxxx", false},
			{[]string{"ragtail", "bench", "--url", "http://h/cb#access_token=" + inQuery + "&state=1"}, 3, inQuery, "http://h/cb#access_token=xxxxx&state=1", false},
			{[]string{"ragtail", "bench", "--api-key", secret}, 3, secret, "xxxxx", true},
			{[]string{"ragtail", "serve", "--admin-token=" + secret}, 2, secret, "--admin-token=xxxxx", strings.ContainsAny(secret, "& \t\r\n")},
			{[]string{"ragtail", "bench", "-H", "Authorization: Bearer " + secret}, 3, secret, "Authorization: xxxxx", true},
		}
		if !strings.ContainsAny(secret, "& \t\r\n'") {
			places = append(places, place{[]string{"ragtail", "ingest", "--docstore", "host=db password=" + secret + " dbname=rag"}, 3, secret,
				"host=db password=xxxxx dbname=rag", false})
		}
		for _, p := range places {
			got := redact.Args(p.args)[p.at]
			if strings.Contains(got, p.form) && !strings.Contains(p.want, p.form) {
				t.Errorf("Args(%q) kept the secret: %q", p.args, got)
			}
			line := "open " + p.args[p.at] + ": connection refused"
			if got := redact.String(line); !p.bare && strings.Contains(got, p.form) && !strings.Contains("open "+p.want+": connection refused", p.form) {
				t.Errorf("String(%q) kept the secret: %q", line, got)
			}
		}
	})
}

// Package redact hides credentials in what ragtail shows of its own inputs: the command line
// (/debug/pprof/cmdline, config.command in a bench result), log records and error messages.
// One set of rules serves all of them:
//
//   - the password of a URL's userinfo (postgres://app:s3cret@db/rag becomes
//     postgres://app:xxxxx@db/rag, redis://:pw@redis:6379/0 becomes redis://:xxxxx@redis:6379/0);
//   - the value of a secret-looking name=value pair, in a URL's query or fragment, a key/value
//     connection string ("host=db password=s3cret") or a --flag=value argument;
//   - on a command line, the value of a secret flag given as --flag value or --flag=value, and
//     of a header flag (--header, -H) past the header's name.
//
// A name is secret when its last word (words split at '-', '_' and '.', case ignored) is key or
// ends in key (api_key, apiKey, X-Api-Key), names a token but not a count of tokens (token,
// access_token, sessionToken, not max-tokens), or holds password, passwd, passphrase, secret,
// credential or signature, or is pwd, pass, sig, auth or authorization. Keeping the last word
// keeps --key-count or --token-budget readable while --llm-api-key and X-Amz-Signature are not.
//
// A redacted value reads Marker, as net/url's URL.Redacted writes a password.
package redact

import (
	"slices"
	"strings"
)

// Marker replaces every value the rules hide.
const Marker = "xxxxx"

// headerFlags are the flags whose value is a header, "Name: value": the name stays.
var headerFlags = []string{"header", "H"}

// Args returns a copy of a command line in os.Args form (the program's name first) with every
// credential hidden: the values of secret flags (--api-key sk-1, --admin-token=t) and of header
// flags past the name, and in every argument, the program's name and those after "--"
// included, URL passwords and secret name=value pairs (see String). A secret flag takes the
// next argument as its value whatever it looks like, as package flag does.
func Args(args []string) []string {
	out := make([]string, len(args))
	secretNext := "" // the secret flag whose value is the next argument
	flags := true    // before "--"
	for i, a := range args {
		switch {
		case secretNext != "":
			out[i] = flagValue(secretNext, a)
			secretNext = ""
			continue
		case i == 0 || !flags:
		case a == "--":
			flags = false
		case len(a) > 1 && a[0] == '-':
			name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !SecretName(name) && !slices.Contains(headerFlags, name) {
				break
			}
			if hasVal {
				out[i] = a[:len(a)-len(val)] + flagValue(name, val)
				continue
			}
			secretNext = name
		}
		out[i] = String(a)
	}
	return out
}

// flagValue hides the value v of the secret or header flag name.
func flagValue(name, v string) string {
	if v == "" {
		return ""
	}
	if slices.Contains(headerFlags, name) {
		if header, _, ok := strings.Cut(v, ":"); ok {
			return header + ": " + Marker
		}
	}
	return Marker
}

// String returns s with the password of every URL in it and the value of every secret
// name=value pair in it replaced by Marker. A pair's name starts s or follows one of ?&#;, a
// space, a quote or a bracket; its value runs to the next & or white space, or, quoted in
// single quotes as in a connection string, to the closing quote. A string with neither "://"
// nor "=" is returned as it is, without allocating.
func String(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "=") {
		return s
	}
	spans := urlPasswords(s, nil)
	spans = secretPairs(s, spans)
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for _, sp := range spans {
		if sp.start < at { // overlaps the span replaced last: one Marker for both
			at = max(at, sp.end)
			continue
		}
		b.WriteString(s[at:sp.start])
		b.WriteString(Marker)
		at = sp.end
	}
	b.WriteString(s[at:])
	return b.String()
}

// span is a byte range of a string to replace.
type span struct{ start, end int }

// urlPasswords appends the spans of the passwords of the URLs in s: after "scheme://", the
// authority runs to the first '/', '?', '#', white space or quote; its userinfo to its last
// '@'; the password from the userinfo's first ':'.
func urlPasswords(s string, spans []span) []span {
	for i := 0; ; {
		j := strings.Index(s[i:], "://")
		if j < 0 {
			return spans
		}
		start := i + j + len("://")
		end := start
		for end < len(s) && !strings.ContainsRune("/?#\"'` \t\r\n<>", rune(s[end])) {
			end++
		}
		if at := strings.LastIndexByte(s[start:end], '@'); at >= 0 {
			if colon := strings.IndexByte(s[start:start+at], ':'); colon >= 0 && colon+1 < at {
				spans = append(spans, span{start + colon + 1, start + at})
			}
		}
		i = start
	}
}

// secretPairs appends the spans of the values of the secret name=value pairs in s.
func secretPairs(s string, spans []span) []span {
	for i := 0; i < len(s); {
		e := strings.IndexByte(s[i:], '=')
		if e < 0 {
			return spans
		}
		e += i
		i = e + 1
		ks := e
		for ks > 0 && isNameByte(s[ks-1]) {
			ks--
		}
		if ks == e || (ks > 0 && !strings.ContainsRune("?&#; \t\r\n\"'`([{,", rune(s[ks-1]))) {
			continue
		}
		if !SecretName(strings.TrimLeft(s[ks:e], "-")) {
			continue
		}
		vs, ve := e+1, e+1
		if ve < len(s) && s[ve] == '\'' {
			ve++
			for ve < len(s) && s[ve] != '\'' {
				if s[ve] == '\\' {
					ve++
				}
				ve++
			}
			ve = min(ve+1, len(s))
		} else {
			for ve < len(s) && !strings.ContainsRune("& \t\r\n", rune(s[ve])) {
				ve++
			}
		}
		if ve > vs {
			spans = append(spans, span{vs, ve})
		}
		i = ve
	}
	return spans
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// SecretName reports whether a flag, parameter or header name names a credential (see the
// package doc). Leading dashes are ignored.
func SecretName(name string) bool {
	name = strings.TrimLeft(name, "-")
	if i := strings.LastIndexAny(name, "-_."); i >= 0 {
		name = name[i+1:]
	}
	w := strings.ToLower(name)
	switch w {
	case "pwd", "pass", "sig", "auth", "authorization":
		return true
	}
	if strings.HasSuffix(w, "key") || strings.Contains(w, "token") && !strings.HasSuffix(w, "tokens") {
		return true
	}
	for _, part := range []string{"password", "passwd", "passphrase", "secret", "credential", "signature"} {
		if strings.Contains(w, part) {
			return true
		}
	}
	return false
}

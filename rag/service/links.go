package service

import (
	"fmt"
	"net"
	"net/url"
	"slices"

	"github.com/ragtail/ragtail/rag/link"
)

// links are the network links the service reaches its real backends through.
type links struct {
	byName map[string]*link.Link
}

// openLinks starts a link for every entry of specs and returns b with each linked backend's
// address replaced by its link's. A backend keeps its own name for TLS (Qdrant's ServerName)
// through qdrantServerName.
func openLinks(b Backends, specs map[string]link.Spec) (Backends, *links, error) {
	ls := &links{byName: map[string]*link.Link{}}
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := b.linkable(name); err != nil {
			_ = ls.Close()
			return b, nil, err
		}
		var err error
		switch name {
		case "qdrant":
			if host, _, herr := net.SplitHostPort(b.Qdrant.Addr); herr == nil && b.Qdrant.ServerName == "" {
				b.Qdrant.ServerName = host
			}
			b.Qdrant.Addr, err = ls.open(name, b.Qdrant.Addr, specs[name])
		case "llm":
			b.LLM.URL, err = ls.rewrite(name, b.LLM.URL, specs[name])
		case "embed":
			b.Embed.URL, err = ls.rewrite(name, b.Embed.URL, specs[name])
		case "docstore":
			b.DocStore, err = ls.rewrite(name, b.DocStore, specs[name])
		case "cache":
			b.Cache, err = ls.rewrite(name, b.Cache, specs[name])
		}
		if err != nil {
			_ = ls.Close()
			return b, nil, fmt.Errorf("--link %s: %w", name, err)
		}
	}
	return b, ls, nil
}

// open starts the link name in front of addr (host:port) and returns the link's address.
func (ls *links) open(name, addr string, spec link.Spec) (string, error) {
	l, err := link.New(name, addr, spec)
	if err != nil {
		return "", err
	}
	ls.byName[name] = l
	return l.Addr(), nil
}

// rewrite starts the link name in front of rawURL's host and returns rawURL pointing at the link.
func (ls *links) rewrite(name, rawURL string, spec link.Spec) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("a link needs a URL with a host, got %q", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		port := map[string]string{"http": "80", "https": "443", "postgres": "5432", "postgresql": "5432", "redis": "6379", "rediss": "6379"}[u.Scheme]
		if port == "" {
			return "", fmt.Errorf("a link needs the port of %q", rawURL)
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	addr, err := ls.open(name, host, spec)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// all returns the links in name order.
func (ls *links) all() []*link.Link {
	if ls == nil {
		return nil
	}
	out := make([]*link.Link, 0, len(ls.byName))
	for _, name := range LinkNames {
		if l := ls.byName[name]; l != nil {
			out = append(out, l)
		}
	}
	return out
}

// specs returns every link's current spec by name.
func (ls *links) specs() map[string]link.Spec {
	out := map[string]link.Spec{}
	for _, l := range ls.all() {
		out[l.Name()] = l.Spec()
	}
	return out
}

// Close closes every link.
func (ls *links) Close() error {
	var first error
	for _, l := range ls.all() {
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

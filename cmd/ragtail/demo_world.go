package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
	"github.com/ragtail/ragtail/rag/service"
)

// The demo's world: the index shards are collections of a Qdrant-protocol server a zone away
// (demoLink), each search answering with a heavy-tailed lognormal latency (P99 about 6.4 x the
// median at sigma 0.8), the last shard a slower replica. --shard-latency and --link qdrant=...
// replace them.
var (
	demoShardLatency   = "lognormal:25ms,0.8,2s"
	demoReplicaLatency = "lognormal:50ms,0.8,2s"
	demoLink           = "latency:2ms,jitter:1ms"
)

// demoWorld is the running Qdrant-protocol server behind the demo's shards.
type demoWorld struct {
	srv    *qdranttest.Server
	laws   []latency.Law
	link   link.Spec
	chunks int // chunks ingested into the shards
}

// startDemoWorld starts the Qdrant-protocol server, gives each shard collection its latency law,
// ingests the built-in corpus into it, and points cfg's retriever at it through a link.
func startDemoWorld(ctx context.Context, cfg *service.Config, o *serviceOptions) (*demoWorld, error) {
	w := &demoWorld{laws: cfg.ShardLatency}
	if !flagGiven(o.fs, "shard-latency") {
		w.laws = make([]latency.Law, cfg.Shards)
		for i := range w.laws {
			text := demoShardLatency
			if i == cfg.Shards-1 && cfg.Shards > 1 {
				text = demoReplicaLatency
			}
			law, err := latency.Parse(text)
			if err != nil {
				return nil, err
			}
			w.laws[i] = law
		}
	}
	var err error
	if w.link, err = link.Parse(demoLink); err != nil {
		return nil, err
	}
	if s, ok := cfg.Links["qdrant"]; ok {
		w.link = s
	}
	if w.srv, err = qdranttest.Start(qdranttest.WithSeed(cfg.Seed)); err != nil {
		return nil, fmt.Errorf("start the demo's Qdrant-protocol server: %w", err)
	}
	cfg.Backends.Qdrant.Addr = w.srv.Addr()
	in := service.DefaultIngestConfig()
	in.Shards, in.Backends, in.Dim, in.Seed, in.CorpusDocs = cfg.Shards, cfg.Backends, cfg.Dim, cfg.Seed, cfg.CorpusDocs
	sum, err := service.Ingest(ctx, in, nil)
	if err != nil {
		w.srv.Close()
		return nil, fmt.Errorf("ingest the corpus into the demo's shards: %w", err)
	}
	w.chunks = sum.Written
	q, err := retrieve.NewQdrant(w.srv.Addr(), cfg.Backends.Qdrant.Collection, cfg.Shards)
	if err != nil {
		w.srv.Close()
		return nil, err
	}
	for i := range cfg.Shards {
		w.srv.SetCollectionLatency(q.ShardCollection(i), w.laws[min(i, len(w.laws)-1)])
	}
	_ = q.Close()
	cfg.ShardLatency = w.laws
	links := map[string]link.Spec{"qdrant": w.link}
	for name, s := range cfg.Links {
		if name != "qdrant" {
			links[name] = s
		}
	}
	cfg.Links = links
	return w, nil
}

// String describes the world in one line.
func (w *demoWorld) String() string {
	laws := make([]string, len(w.laws))
	for i, l := range w.laws {
		laws[i] = l.String()
	}
	return fmt.Sprintf("%d chunks in shards on a Qdrant-protocol server behind a link (%s), search latency %s", w.chunks, w.link, strings.Join(laws, "; "))
}

// flagGiven reports whether the flag name was given on fs's command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// Close stops the server.
func (w *demoWorld) Close() { w.srv.Close() }

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/retrieve"
	"github.com/ragtail/ragtail/rag/service"
)

// TestKeepaliveArmsWorld: the keepalive experiment's services reach their Qdrant-protocol
// servers over TLS and through links of the stated round trips, and only the max-age servers
// have a MaxConnectionAge.
func TestKeepaliveArmsWorld(t *testing.T) {
	t.Parallel()
	base := service.DefaultConfig()
	base.Profile, base.CorpusDocs = "tiny", 60
	arms, stop, err := startKeepaliveArms(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	if len(arms) != 2*len(keepaliveLinkRTTs) {
		t.Fatalf("%d arms, want a max-age and a no-max-age arm per link round trip", len(arms))
	}
	for i, arm := range arms {
		rtt := keepaliveLinkRTTs[i/2]
		wantAge := []time.Duration{keepaliveServer.MaxConnectionAge, 0}[i%2]
		if arm.LinkRTT != rtt || arm.MaxConnectionAge != wantAge {
			t.Errorf("arm %q: link %v, max-age %v; want %v and %v", arm.Name, arm.LinkRTT, arm.MaxConnectionAge, rtt, wantAge)
		}
		// The service is ready, so it has reached its server: over TLS, through its link.
		c := arm.Counters()
		if c["tls_handshakes"] < 1 || c["tls_handshake_failures"] != 0 {
			t.Errorf("arm %q: counters %v, want TLS handshakes and no failure", arm.Name, c)
		}
		resp, err := http.Get(arm.Target.AdminURL + "/admin/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Links []struct {
				Name        string `json:"name"`
				Toxics      string `json:"toxics"`
				Connections int    `json:"connections"`
			} `json:"links"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Links) != 1 || st.Links[0].Name != "qdrant" || st.Links[0].Toxics != "latency:"+rtt.String() || st.Links[0].Connections < 1 {
			t.Fatalf("arm %q: links %+v, want the qdrant link of latency %v, used", arm.Name, st.Links, rtt)
		}
		// Without reconnects the counts are still: the server saw the ingest's pool, directly,
		// and the service's, through the link.
		if direct := int(c["connections"]) - st.Links[0].Connections; wantAge == 0 && direct != retrieve.DefaultQdrantPoolSize {
			t.Errorf("arm %q: %v server connections, %d through the link: want all but the ingest's %d through it",
				arm.Name, c["connections"], st.Links[0].Connections, retrieve.DefaultQdrantPoolSize)
		}
	}
}

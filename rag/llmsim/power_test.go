package llmsim_test

import (
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// TestPowerModel: the simulated device draws its idle power and, during a step, the TDP's
// dynamic range in proportion to the share of the step the GPU works. The energy the engine
// reports after a run is the sum, step by step, of each step's power times its duration, and
// the figures of the A100 profile are the datasheet's 400 W with 15% of it idle.
func TestPowerModel(t *testing.T) {
	t.Parallel()
	p := profile(t, llmsim.DefaultProfile)
	if p.TDPWatts != 400 || p.IdleWatts != 60 || p.HostStepTime != llmsim.StepFloor() {
		t.Fatalf("A100 power: TDP %g W, idle %g W, host step %v; want 400, 60 and the step floor", p.TDPWatts, p.IdleWatts, p.HostStepTime)
	}
	if got := p.StepPower(p.HostStepTime); got != p.IdleWatts {
		t.Errorf("a step that is all host time draws %g W, want the idle %g", got, p.IdleWatts)
	}
	// A batch-1 decode step: all but the floor on the GPU.
	d := p.StepTime(0, 1, 1000)
	want := 60 + 340*float64(d-p.HostStepTime)/float64(d)
	if got := p.StepPower(d); math.Abs(got-want) > 1e-9 {
		t.Errorf("decode step of %v: %g W, want %g", d, got, want)
	}
	for _, prof := range llmsim.Profiles() {
		hw := prof.Name != "tiny"
		if hw != (prof.TDPWatts > 0) || prof.IdleWatts != 0.15*prof.TDPWatts {
			t.Errorf("%s: idle %g W, TDP %g W: want 15%% of the datasheet's TDP (none for tiny)", prof.Name, prof.IdleWatts, prof.TDPWatts)
		}
	}
	// Without a power model, no power series.
	tiny := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	tsrv := httptest.NewServer(llmsim.NewHandler(tiny))
	defer tsrv.Close()
	if err := testutil.ScrapeAndCompare(tsrv.URL+"/metrics", strings.NewReader(""),
		"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"); err != nil {
		t.Errorf("tiny exports power: %v", err)
	}

	e := newEngine(t, p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	for i, n := range []int{1800, 600, 40} {
		submit(t, e, string(rune('a'+i)), n, 32)
	}
	steps := stepAll(t, e)
	var sum float64
	var busy time.Duration
	for _, s := range steps {
		sum += p.StepPower(s.Duration) * s.Duration.Seconds()
		busy += s.Duration
	}
	st := e.Stats()
	sum += p.IdleWatts * (st.Now - busy).Seconds()
	if math.Abs(st.EnergyJoules-sum) > 1e-6*sum {
		t.Errorf("energy %g J after %d steps, want %g J step by step", st.EnergyJoules, len(steps), sum)
	}
	if st.Running != 0 || st.PowerWatts != p.IdleWatts {
		t.Errorf("idle engine draws %g W, want %g", st.PowerWatts, p.IdleWatts)
	}

	// dcgm-exporter's names and labels, as bench's server-metrics scrape reads them.
	srv := httptest.NewServer(llmsim.NewHandler(e))
	defer srv.Close()
	const head = `
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W). Simulated: idle power, plus the TDP's dynamic range while a step runs on the GPU.
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{device="nvidia0",gpu="0",modelName="NVIDIA A100-SXM4-80GB"} 60
`
	energy := fmt.Sprintf(`
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ). Simulated from the power model since the engine started.
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{device="nvidia0",gpu="0",modelName="NVIDIA A100-SXM4-80GB"} %.0f
`, math.Floor(st.EnergyJoules*1000))
	if err := testutil.ScrapeAndCompare(srv.URL+"/metrics", strings.NewReader(head+energy),
		"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"); err != nil {
		t.Error(err)
	}
}

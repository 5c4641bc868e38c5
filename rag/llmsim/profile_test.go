package llmsim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

// The Llama profiles, GPU by GPU: the datasheet's peak bandwidth, dense FP16 tensor
// throughput and memory as CUDA reports it, restated here so that the test checks the rule
// against figures it does not take from the code under test.
var datasheets = []struct {
	key            string
	bytesPerSec    float64
	denseFP16FLOPS float64
	memGiB         float64
}{
	{key: "a10g", bytesPerSec: 600e9, denseFP16FLOPS: 70e12, memGiB: 22.49},
	{key: "l4", bytesPerSec: 300e9, denseFP16FLOPS: 121e12, memGiB: 22.49},
	{key: "a100", bytesPerSec: 2.039e12, denseFP16FLOPS: 312e12, memGiB: 79.2},
	{key: "h100", bytesPerSec: 3.35e12, denseFP16FLOPS: 989e12, memGiB: 79.65},
	{key: "h200", bytesPerSec: 4.8e12, denseFP16FLOPS: 989e12, memGiB: 140.4},
}

// TestProfilesValidate: every built-in profile passes Validate, ProfileByName finds it by its
// name, and the names are those the documentation lists.
func TestProfilesValidate(t *testing.T) {
	t.Parallel()
	want := []string{"tiny"}
	for _, gpu := range datasheets {
		want = append(want, "llama3-8b-"+gpu.key, "llama3-8b-awq-"+gpu.key)
	}
	got := map[string]bool{}
	for _, p := range llmsim.Profiles() {
		got[p.Name] = true
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		found, err := llmsim.ProfileByName(p.Name)
		if err != nil || found != p {
			t.Errorf("ProfileByName(%q) = %v, %v; want the profile itself", p.Name, found.Name, err)
		}
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("%s has no description", p.Name)
		}
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("no built-in profile %q", name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d profiles, want %d: %v", len(got), len(want), want)
	}
	if _, err := llmsim.ProfileByName(llmsim.DefaultProfile); err != nil {
		t.Errorf("default profile: %v", err)
	}
}

// TestProfilesFollowTheRule: each Llama profile's costs follow from its GPU's datasheet by the
// one rule: a step is the floor plus the weights read at 80% of the peak bandwidth; a prompt
// token or a decoding sequence costs 2 x 8.03 GFLOP at 55% of the dense FP16 peak; a cached
// token's 128 KiB is read at 80% of the bandwidth; the KV cache gets what 90% of the memory
// leaves. The description names the floor.
func TestProfilesFollowTheRule(t *testing.T) {
	t.Parallel()
	floor := llmsim.StepFloor()
	// The floor is what a published batch-1 measurement leaves above the weight read: small
	// and positive (see profile.go).
	if floor <= 0 || floor > time.Millisecond {
		t.Fatalf("step floor %v, want a small positive cost", floor)
	}
	near := func(got, want time.Duration) bool { // within the nanosecond roundings of the costs
		d := got - want
		return d >= -2 && d <= 2
	}
	for _, gpu := range datasheets {
		for _, prefix := range []string{"llama3-8b-", "llama3-8b-awq-"} {
			p := profile(t, prefix+gpu.key)
			bandwidth := gpu.bytesPerSec * 0.8
			weightRead := time.Duration(float64(p.WeightBytes) / bandwidth * 1e9)
			if !near(p.StepOverhead, floor+weightRead) {
				t.Errorf("%s: step overhead %v, want floor %v + weights %v", p.Name, p.StepOverhead, floor, weightRead)
			}
			flops := time.Duration(2 * 8.03e9 / (gpu.denseFP16FLOPS * 0.55) * 1e9)
			if !near(p.PrefillPerToken, flops) || !near(p.DecodePerSeq, flops) {
				t.Errorf("%s: prefill %v and decode %v per token, want %v", p.Name, p.PrefillPerToken, p.DecodePerSeq, flops)
			}
			if kv := time.Duration(128 << 10 / bandwidth * 1e9); !near(p.AttentionPerKVToken, kv) {
				t.Errorf("%s: %v per cached token, want %v", p.Name, p.AttentionPerKVToken, kv)
			}
			// A decode step at batch 1 with no context: floor + weights + one sequence's FLOPs.
			if got := p.StepTime(0, 1, 0); !near(got, floor+weightRead+flops) {
				t.Errorf("%s: batch-1 decode step %v, want %v", p.Name, got, floor+weightRead+flops)
			}
			if got, want := float64(p.GPUMemoryBytes)/(1<<30), gpu.memGiB; got < want-1e-6 || got > want {
				t.Errorf("%s: %.3f GiB of device memory, want %.2f", p.Name, got, want)
			}
			if p.NumBlocks != p.BlocksForMemory(llmsim.GPUMemoryUtilization) {
				t.Errorf("%s: %d blocks, but its memory gives %d", p.Name, p.NumBlocks, p.BlocksForMemory(llmsim.GPUMemoryUtilization))
			}
			if !strings.Contains(p.Description, "floor") {
				t.Errorf("%s: description %q does not name the per-step floor", p.Name, p.Description)
			}
		}
	}
}

// TestProfilesOrderedByBandwidth: at batch 1, decoding is the weight read, so H200 < H100 <
// A100 < A10G < L4, and the step times less the floor stand in the inverse ratio of the
// bandwidths.
func TestProfilesOrderedByBandwidth(t *testing.T) {
	t.Parallel()
	order := []int{4, 3, 2, 0, 1} // h200, h100, a100, a10g, l4: fastest memory first
	for _, prefix := range []string{"llama3-8b-", "llama3-8b-awq-"} {
		var prev time.Duration
		for i, idx := range order {
			gpu := datasheets[idx]
			p := profile(t, prefix+gpu.key)
			step := p.StepTime(0, 1, 0)
			if i > 0 && step <= prev {
				t.Errorf("%s: batch-1 step %v is not slower than the previous GPU's %v", p.Name, step, prev)
			}
			prev = step
			// Against the A100: weight-read ratio = bandwidth ratio.
			ref := profile(t, prefix+"a100")
			got := float64(p.StepOverhead-llmsim.StepFloor()) / float64(ref.StepOverhead-llmsim.StepFloor())
			want := datasheets[2].bytesPerSec / gpu.bytesPerSec
			if d := got/want - 1; d > 1e-6 || d < -1e-6 {
				t.Errorf("%s: weight read %.4f x the A100's, want %.4f (inverse bandwidth ratio)", p.Name, got, want)
			}
		}
	}
}

// TestSmallGPUsFitFP16: the FP16 weights (16.06 GB) fit on the 24 GB GPUs with a KV cache that
// still holds one request of the full context, as vLLM requires to start.
func TestSmallGPUsFitFP16(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"llama3-8b-a10g", "llama3-8b-l4"} {
		p := profile(t, name)
		if p.CapacityTokens() < p.MaxModelLen {
			t.Errorf("%s: %d tokens of KV cache, below max model len %d", name, p.CapacityTokens(), p.MaxModelLen)
		}
		// (22.49 GiB x 0.9 - 2.3 GiB - 16.06 GB) / 2 MiB per block.
		if p.NumBlocks < 1500 || p.NumBlocks > 1550 {
			t.Errorf("%s: %d blocks, want about 1527", name, p.NumBlocks)
		}
	}
}

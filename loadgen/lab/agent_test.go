package lab

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Steps drawn independently, each beyond its threshold with probability q: the share of
// requests with a slow step is 1 - (1-q)^5, and the bootstrap interval of the prediction from
// the per-step shares covers it. Steps that are slow together (one draw for the whole request)
// leave a share of q, below the prediction: the rule's "slow steps cluster" case.
func TestAgentSharesAgainstMath(t *testing.T) {
	const n, q = 20000, 0.02
	rng := rand.New(rand.NewPCG(1, 2))
	thresholds := [agentSteps]float64{1, 1, 1, 1, 1}
	indep := make([][]float64, n)
	together := make([][]float64, n)
	for i := range n {
		indep[i] = make([]float64, agentSteps)
		together[i] = make([]float64, agentSteps)
		slow := rng.Float64() < q
		for k := range agentSteps {
			if rng.Float64() < q {
				indep[i][k] = 2
			}
			if slow {
				together[i][k] = 2
			}
		}
	}
	want := 1 - math.Pow(1-q, agentSteps)
	se := math.Sqrt(want * (1 - want) / n)
	slow, per := beyond(indep, thresholds)
	if got := float64(slow) / n; math.Abs(got-want) > 4*se {
		t.Errorf("independent steps: share %.4f, want %.4f ± %.4f", got, want, 4*se)
	}
	pred := predictedShare(per, n)
	if math.Abs(pred-want) > 4*se {
		t.Errorf("prediction %.4f, want %.4f", pred, want)
	}
	lo, hi := predictionCI(indep[:2000], thresholds, 3)
	if lo > want || hi < want || hi-lo > 0.03 {
		t.Errorf("prediction interval [%.4f, %.4f] of 2000 requests misses %.4f or is too wide", lo, hi, want)
	}
	slow, per = beyond(together, thresholds)
	share := float64(slow) / n
	if math.Abs(share-q) > 4*math.Sqrt(q*(1-q)/n) || predictedShare(per, n) < 4*q {
		t.Errorf("clustered steps: share %.4f (want %.2f), prediction %.4f", share, q, predictedShare(per, n))
	}
	if out, _ := agentVerdict(0.03, 0.05, 0.035, 0.06); out != Reproduced {
		t.Errorf("amplified and as predicted: %s", out)
	}
	if out, _ := agentVerdict(0.015, 0.025, 0.04, 0.06); out != NotReproduced {
		t.Errorf("amplified, below the prediction: %s", out)
	}
	if out, _ := agentVerdict(0.004, 0.02, 0.04, 0.06); out != NotReproduced {
		t.Errorf("not above 1%%: %s", out)
	}
	if out, _ := agentVerdict(0.001, 0.008, 0.04, 0.06); out != Opposite {
		t.Errorf("below 1%%: %s", out)
	}
}

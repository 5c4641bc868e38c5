package client

import (
	"fmt"

	"github.com/ragtail/ragtail/loadgen"
)

// Bounds on the tool calls one response may make, so that a server streaming endless calls
// costs the generator bounded memory.
const (
	// MaxToolCalls is the most tool calls one response may make.
	MaxToolCalls     = 64
	maxToolIDBytes   = 256     // a call's id or function name
	maxArgumentBytes = 1 << 20 // the arguments of all of a response's calls together
)

// toolCallAcc puts together the tool calls of one response from the pieces its chunks carry:
// the pieces of one call share its index, the first carries its id and name, and the argument
// fragments are joined in order (as OpenAI and vLLM stream them).
type toolCallAcc struct {
	calls     []loadgen.ToolCall
	indexes   []int // the index of each call in calls
	argsBytes int
}

// add adds the pieces of one chunk; keep is false when only the calls' number matters.
func (a *toolCallAcc) add(pieces []toolCallPiece, keep bool) error {
	for i := range pieces {
		p := &pieces[i]
		k := -1
		for j, idx := range a.indexes {
			if idx == p.index {
				k = j
				break
			}
		}
		if k < 0 {
			if len(a.calls) >= MaxToolCalls {
				return fmt.Errorf("response makes more than %d tool calls", MaxToolCalls)
			}
			a.calls = append(a.calls, loadgen.ToolCall{Type: "function"})
			a.indexes = append(a.indexes, p.index)
			k = len(a.calls) - 1
		}
		if !keep {
			continue
		}
		c := &a.calls[k]
		if id := unquoteJSON(p.id); id != "" {
			c.ID = truncateTo(id, maxToolIDBytes)
		}
		if name := unquoteJSON(p.name); name != "" {
			c.Function.Name = truncateTo(name, maxToolIDBytes)
		}
		if args := unquoteJSON(p.arguments); args != "" {
			if a.argsBytes += len(args); a.argsBytes > maxArgumentBytes {
				return fmt.Errorf("tool call arguments over %d bytes", maxArgumentBytes)
			}
			c.Function.Arguments += args
		}
	}
	return nil
}

// record puts the calls into rec: their number always, the calls themselves when kept and the
// response succeeded (no step answers the calls of a failed one). A kept call without an id
// fails the request: no tool message could answer it.
func (a *toolCallAcc) record(rec *loadgen.Record, keep bool) {
	rec.ToolCalls = len(a.calls)
	if !keep || len(a.calls) == 0 || rec.ErrKind != "" {
		return
	}
	for i := range a.calls {
		if a.calls[i].ID == "" {
			fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("tool call %d has no id for a tool message to answer", i))
			return
		}
	}
	rec.Calls = a.calls
}

package shape

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// ConversationSessions returns an endless source of sessions replaying the conversations turn
// by turn, in a seeded random order shuffled afresh on every pass (the order Prompts draws a
// dataset's entries in). Every turn after the first continues the conversation
// (loadgen.Request.Continues) and is due think after the answer to the previous one ended.
// Session ids are the conversation's id and the draw's number ("c12.0", "c12.57"), unique in
// the run.
func ConversationSessions(convs []dataset.Conversation, think time.Duration, seed uint64) (SessionSource, error) {
	if len(convs) == 0 {
		return nil, errors.New("conversations: none")
	}
	if think < 0 {
		return nil, fmt.Errorf("conversations: think time %v must not be negative", think)
	}
	s := &conversationSource{convs: convs, think: think, rng: newRand(seed, streamPrompts), order: make([]int, len(convs))}
	s.shuffle()
	return s, nil
}

type conversationSource struct {
	convs []dataset.Conversation
	think time.Duration
	rng   *rand.Rand
	order []int
	i, n  int
}

func (s *conversationSource) shuffle() {
	for i := range s.order {
		s.order[i] = i
	}
	s.rng.Shuffle(len(s.order), func(i, j int) { s.order[i], s.order[j] = s.order[j], s.order[i] })
	s.i = 0
}

func (s *conversationSource) Next() (dataset.Session, bool) {
	if s.i == len(s.order) {
		s.shuffle()
	}
	c := &s.convs[s.order[s.i]]
	s.i++
	sess := dataset.Session{ID: fmt.Sprintf("%s.%d", c.ID, s.n), Steps: make([]dataset.SessionStep, len(c.Turns))}
	s.n++
	for k, t := range c.Turns {
		tokens := 0
		for _, m := range t.Messages {
			tokens += dataset.EstimateTokens(m.Content)
		}
		st := dataset.SessionStep{Request: loadgen.Request{Messages: t.Messages, MaxTokens: t.MaxTokens, PromptTokens: tokens,
			Extra: c.Extra, Continues: k > 0}}
		if k > 0 {
			st.Think = s.think
		}
		sess.Steps[k] = st
	}
	return sess, true
}

// ContinueConversations marks every chat step of the sessions after the first as continuing
// the conversation (loadgen.Request.Continues): each is then sent after the session's earlier
// chat messages and the server's answers to them, and its own messages are the new turn.
// Lookup steps are left as they are.
func ContinueConversations(sessions []dataset.Session) {
	for i := range sessions {
		for k := 1; k < len(sessions[i].Steps); k++ {
			if req := &sessions[i].Steps[k].Request; req.Path == "" {
				req.Continues = true
			}
		}
	}
}

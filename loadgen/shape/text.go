package shape

import (
	"math/rand/v2"
	"strings"
	"sync"
)

// words are short, common English words: each is one token for BPE tokenizers (Llama's,
// OpenAI's) and for ragtail's own count (a token per six characters of a word), so a text of n
// words is close to n tokens wherever it is sent.
var words = shortWords(`the of and to in is that for it as with was on be by at this are from

or an have not but had his they you were her she which all one their there been has when who
will more would if no out so said what up its about into than them can only other new some
could time these two may then do first any my now such like our over man me even most made
after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men
work long get here between both life being under never day same another know while last might
us great old year off come since against go came right used take three states himself few
house use during without again place around however home small found thought went say part
once general high upon school every does got united left number course war until always away
something fact though water less public put think almost hand enough far took head yet system
set better told nothing night end why called eyes find going look asked later knew point
next city give group toward young days let room often side money open order form case best
whole seemed began kind turned brought`)

func shortWords(s string) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		if len(w) <= 6 {
			out = append(out, w)
		}
	}
	return out
}

// corpusWords is how many words the shared synthetic text holds; prompts are slices of it.
const corpusWords = 1 << 16

// text is a long run of random words shared by every synthetic prompt: a prompt of n words is
// a substring of it, so making one costs no allocation.
var text = sync.OnceValue(func() *wordText {
	r := rand.New(rand.NewPCG(0x7e47, 0x7e47))
	var b strings.Builder
	starts := make([]int32, 0, corpusWords+1)
	for i := range corpusWords {
		starts = append(starts, int32(b.Len()))
		w := words[r.IntN(len(words))]
		if i%17 == 16 {
			w += "."
		}
		b.WriteString(w)
		b.WriteByte(' ')
	}
	starts = append(starts, int32(b.Len()))
	return &wordText{s: b.String(), starts: starts}
})

type wordText struct {
	s      string
	starts []int32 // byte offset of each word; the last entry is the end
}

// slice returns n words starting at word i (wrapping is not needed: callers keep i+n in range).
func (t *wordText) slice(i, n int) string {
	n = max(1, min(n, corpusWords))
	i = max(0, min(i, corpusWords-n))
	return t.s[t.starts[i] : t.starts[i+n]-1]
}

// syntheticText returns n words from a position chosen by r or, when r is nil, from a fixed
// position per key that leaves room words after it: the same key always gives the same text,
// and a longer text of the same key extends a shorter one (a shared prefix), up to room words.
func syntheticText(r *rand.Rand, key uint64, n, room int) string {
	t := text()
	n = max(1, min(n, corpusWords))
	if r != nil {
		return t.slice(r.IntN(corpusWords-n+1), n)
	}
	room = max(n, min(room, corpusWords))
	return t.slice(int(mix(key)%uint64(corpusWords-room+1)), n)
}

// mix is SplitMix64's finaliser: a well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// MaxToolResultTokens bounds the words of a synthetic tool result.
const MaxToolResultTokens = corpusWords

// ToolResult returns a synthetic result of a tool called with arguments (a search's hits, as
// an agent's tool would return them): the arguments quoted, then n words (about n tokens) of
// the shared text at a position hashed from the arguments, so that the same call always gets
// the same result.
func ToolResult(arguments string, n int) string {
	h := uint64(14695981039346656037) // FNV-1a
	for i := range len(arguments) {
		h = (h ^ uint64(arguments[i])) * 1099511628211
	}
	return "results for " + arguments + ": " + syntheticText(nil, h, n, n)
}

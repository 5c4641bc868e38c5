package llmsim

import (
	"unicode/utf8"

	"github.com/ragtail/ragtail/rag"
)

// kvCache is the engine's pool of KV-cache blocks. Without prefix caching it only counts: a
// sequence holds some number of private blocks and gives them back when it ends. With prefix
// caching, the full blocks of prompts become cachedBlocks, named by a hash chain (see
// promptBlockHashes) and shared by every running sequence whose prompt starts with the same
// tokens; a cached block no sequence holds stays in the pool, still findable, and is evicted
// (least recently released first) only when a block is needed and no uncached one is free.
// It is guarded by Engine.mu.
type kvCache struct {
	total  int
	free   int                     // blocks that hold nothing
	byHash map[uint64]*cachedBlock // nil without prefix caching
	idle   blockList               // cached blocks with no holder, least recently released first
}

// cachedBlock is a full KV-cache block whose tokens are known by their hash chain.
type cachedBlock struct {
	hash       uint64
	refs       int // running sequences holding it
	prev, next *cachedBlock
}

func newKVCache(blocks int, prefixCaching bool) *kvCache {
	c := &kvCache{total: blocks, free: blocks}
	if prefixCaching {
		c.byHash = make(map[uint64]*cachedBlock)
	}
	return c
}

// available is the number of blocks a sequence could be given: free ones and idle cached ones.
func (c *kvCache) available() int { return c.free + c.idle.len }

// used is the number of blocks held by sequences.
func (c *kvCache) used() int { return c.total - c.available() }

// take hands out n private blocks, which the caller has checked are available: free blocks
// first, then the least recently released idle cached blocks, which leave the cache.
func (c *kvCache) take(n int) {
	fromFree := min(n, c.free)
	c.free -= fromFree
	for range n - fromFree {
		b := c.idle.popFront()
		if c.byHash[b.hash] == b {
			delete(c.byHash, b.hash)
		}
	}
}

// give takes back n private blocks.
func (c *kvCache) give(n int) { c.free += n }

// lookup returns the longest run of cached blocks matching hashes from the start. It holds
// none of them; see acquire.
func (c *kvCache) lookup(hashes []uint64) []*cachedBlock {
	var hits []*cachedBlock
	for _, h := range hashes {
		b := c.byHash[h]
		if b == nil {
			break
		}
		hits = append(hits, b)
	}
	return hits
}

// idleAmong counts the blocks of hits no sequence holds: acquiring them takes them out of
// available.
func idleAmong(hits []*cachedBlock) int {
	n := 0
	for _, b := range hits {
		if b.refs == 0 {
			n++
		}
	}
	return n
}

// acquire makes the caller a holder of blocks.
func (c *kvCache) acquire(blocks []*cachedBlock) {
	for _, b := range blocks {
		if b.refs == 0 {
			c.idle.remove(b)
		}
		b.refs++
	}
}

// release gives up the caller's hold on blocks. Blocks nobody holds any more become idle in
// reverse order, as vLLM frees them: the end of a prompt, which fewer requests share, is
// evicted before its start.
func (c *kvCache) release(blocks []*cachedBlock) {
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if b.refs--; b.refs == 0 {
			c.idle.pushBack(b)
		}
	}
}

// register turns one of the caller's private blocks, now holding the tokens named by hash,
// into a cached block that the caller holds, and returns it. If a block with that hash is
// already cached (two sequences computed the same tokens at once), the caller's block stays
// private and register returns nil, as vLLM keeps the first copy.
func (c *kvCache) register(hash uint64) *cachedBlock {
	if _, ok := c.byHash[hash]; ok {
		return nil
	}
	b := &cachedBlock{hash: hash, refs: 1}
	c.byHash[hash] = b
	return b
}

// cached is the number of blocks the prefix cache can find, held or idle.
func (c *kvCache) cached() int { return len(c.byHash) }

// blockList is an intrusive doubly linked list of cached blocks.
type blockList struct {
	head, tail *cachedBlock
	len        int
}

func (l *blockList) pushBack(b *cachedBlock) {
	b.prev, b.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = b
	} else {
		l.head = b
	}
	l.tail = b
	l.len++
}

func (l *blockList) remove(b *cachedBlock) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		l.tail = b.prev
	}
	b.prev, b.next = nil, nil
	l.len--
}

func (l *blockList) popFront() *cachedBlock {
	b := l.head
	l.remove(b)
	return b
}

// Token ids of the chat template's framing, distinct from any word's hash in practice.
const (
	tokenBOS uint64 = iota + 1
	tokenStartHeader
	tokenEndHeader
	tokenEndOfTurn
)

// promptBlockHashes returns the hash chain of the full blocks of the prompt's tokens: the hash
// of block i covers its blockSize token ids and the hash of block i-1, so equal hashes mean
// equal prompts up to the end of that block, as in vLLM's prefix cache. The tokens are those
// rag.PromptTokens counts, in a Llama-3-like chat template: a begin-of-text token, then for
// each message a header start, the role, a header end, the content's tokens and an end of
// turn; a content token is a word, or a piece of at most six runes of a longer word, or a
// punctuation mark (rag.CountTokens), identified by the hash of its text.
func promptBlockHashes(msgs []rag.Message, blockSize int) []uint64 {
	var hashes []uint64
	var parent uint64
	h, n := uint64(fnvOffset), 0
	add := func(token uint64) {
		h = fnvUint64(h, token)
		if n++; n < blockSize {
			return
		}
		parent = fnvUint64(h, parent)
		hashes = append(hashes, parent)
		h, n = fnvOffset, 0
	}
	add(tokenBOS)
	for _, m := range msgs {
		add(tokenStartHeader)
		add(fnvString(fnvString(fnvOffset, "role:"), m.Role))
		add(tokenEndHeader)
		for _, w := range rag.Words(m.Content) {
			for w != "" {
				i, runes := 0, 0
				for i < len(w) && runes < runesPerToken {
					_, size := utf8.DecodeRuneInString(w[i:])
					i += size
					runes++
				}
				add(fnvString(fnvOffset, w[:i]))
				w = w[i:]
			}
		}
		add(tokenEndOfTurn)
	}
	return hashes
}

// 64-bit FNV-1a, inlined so that hashing a prompt allocates nothing per token: a token's id is
// the hash of its text, a block's the hash of its tokens' ids and then of its parent's hash.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvUint64(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

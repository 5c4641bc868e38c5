package shape

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// DefaultKeyPattern names the keys of ragtail's built-in corpus: chunk 0 of document d is
// "doc-%05d#0" (every document has a chunk 0), with DefaultKeyCount documents by default
// (corpus.DefaultDocs; `ragtail serve --corpus-docs` changes it).
const (
	DefaultKeyPattern = "doc-%05d#0"
	DefaultKeyCount   = 600
)

// KeyConfig is a pool of document keys for lookup load (GET /v1/documents/{id}), the mix of
// the cache-penetration pitfall: hot keys by Zipf popularity, a fraction of cold keys, and a
// fraction of keys that do not exist.
type KeyConfig struct {
	// Keys are the existing keys, most popular first. Empty: Count keys from Pattern.
	Keys []string
	// Pattern is a fmt pattern with one integer verb, for keys 0..Count-1.
	Pattern string
	// Count is how many keys Pattern makes.
	Count int
	// Hot is how many of the first keys form the hot set that Zipf popularity draws from;
	// 0 means every key.
	Hot int
	// Alpha is the Zipf exponent of popularity within the hot set (1.2 in the article).
	Alpha float64
	// ColdFraction of lookups go to keys outside the hot set, uniformly: rarely asked, so
	// never cached.
	ColdFraction float64
	// InvalidFraction of lookups ask for keys that do not exist, each one new, so a cache
	// cannot hold them: only a guard such as a Bloom filter stops them reaching the store.
	InvalidFraction float64
	// PathPrefix is prepended to the escaped key; dataset.DefaultKeyPath if empty.
	PathPrefix string
}

// Keys returns a source of document lookups drawn from cfg.
func Keys(cfg KeyConfig, seed uint64) (Source, error) {
	keys := cfg.Keys
	if len(keys) == 0 {
		if cfg.Pattern == "" {
			cfg.Pattern = DefaultKeyPattern
		}
		if cfg.Count == 0 {
			cfg.Count = DefaultKeyCount
		}
		if cfg.Count < 1 || cfg.Count > maxZipfRanks {
			return nil, fmt.Errorf("keys: count must be between 1 and %d, got %d", maxZipfRanks, cfg.Count)
		}
		if strings.Count(cfg.Pattern, "%")-2*strings.Count(cfg.Pattern, "%%") != 1 {
			return nil, fmt.Errorf("keys: pattern %q must hold exactly one integer verb such as %%05d", cfg.Pattern)
		}
		keys = make([]string, cfg.Count)
		for i := range keys {
			keys[i] = fmt.Sprintf(cfg.Pattern, i)
		}
		if strings.Contains(keys[0], "%!") {
			return nil, fmt.Errorf("keys: pattern %q does not format an integer: %q", cfg.Pattern, keys[0])
		}
	}
	hot := cfg.Hot
	if hot <= 0 || hot > len(keys) {
		hot = len(keys)
	}
	if cfg.Alpha == 0 {
		cfg.Alpha = 1.2
	}
	z, err := newZipf(hot, cfg.Alpha)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	if cfg.ColdFraction < 0 || cfg.InvalidFraction < 0 || cfg.ColdFraction+cfg.InvalidFraction > 1 {
		return nil, fmt.Errorf("keys: cold (%v) and invalid (%v) fractions must be non-negative and add up to at most 1", cfg.ColdFraction, cfg.InvalidFraction)
	}
	if cfg.ColdFraction > 0 && hot == len(keys) {
		return nil, errors.New("keys: a cold fraction needs a hot set smaller than the keys (set Hot)")
	}
	prefix := cfg.PathPrefix
	if prefix == "" {
		prefix = dataset.DefaultKeyPath
	}
	return &keySource{keys: keys, hot: hot, zipf: z, cold: cfg.ColdFraction, invalid: cfg.InvalidFraction,
		prefix: prefix, rng: newRand(seed, streamKeys)}, nil
}

type keySource struct {
	keys          []string
	hot           int
	zipf          *zipf
	cold, invalid float64
	prefix        string
	rng           *rand.Rand
}

func (k *keySource) Next() loadgen.Request {
	var key string
	u := k.rng.Float64()
	switch {
	case u < k.invalid:
		key = "missing-" + strconv.FormatUint(k.rng.Uint64(), 16)
	case u < k.invalid+k.cold:
		key = k.keys[k.hot+k.rng.IntN(len(k.keys)-k.hot)]
	default:
		key = k.keys[k.zipf.rank(k.rng)-1]
	}
	return loadgen.Request{Path: k.prefix + dataset.EscapeKey(key), Key: key}
}

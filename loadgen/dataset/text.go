package dataset

// EstimateTokens estimates the tokens of English text the way OpenAI's guidance does, one per
// four characters, which is what a report falls back on when the server returns no usage.
func EstimateTokens(s string) int {
	if s == "" {
		return 0
	}
	return max(1, (len(s)+3)/4)
}

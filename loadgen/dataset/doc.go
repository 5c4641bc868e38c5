// Package dataset reads the files a load is replayed from: prompt datasets (ShareGPT JSON and
// OpenAI-messages JSONL), multi-turn conversations, user sessions, request traces (Mooncake,
// Azure LLM inference, BurstGPT) and document keys. Every reader bounds what a hostile file can
// cost (line and record sizes, counts, token lengths) and names the line or element of a
// malformed entry.
//
// Reading is all it does: loadgen/shape turns what it reads into workloads for loadgen.Run
// (shape.Prompts, shape.Trace, shape.ConversationSessions, shape.Replay).
package dataset

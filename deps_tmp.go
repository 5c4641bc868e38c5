//go:build tools

package tools
import (
 _ "github.com/go-chi/chi/v5"
 _ "github.com/hashicorp/golang-lru/v2"
 _ "github.com/bits-and-blooms/bloom/v3"
 _ "github.com/openai/openai-go/v3"
 _ "github.com/prometheus/client_golang/prometheus"
)

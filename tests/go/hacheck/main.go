// hacheck decodes a HomeAgent memory directory written by `fsmem export --homeagent` with Go's
// encoding/json, strictly (DisallowUnknownFields), into structs transcribed from the shapes in
// homeagent-format.md (§1a Doc v2 and v3, §2 MemoryBlock, §3 context events @6d38a164), then
// encodes each value again as HomeAgent does (MarshalIndent for documents, Marshal for
// context.json) and says whether the bytes are the file's. One JSON line per file on stdout.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// MemoryBlock (internal/memory/block.go).
type MemoryBlock struct {
	ID            string    `json:"id"`
	Modality      string    `json:"modality"`
	Text          string    `json:"text,omitempty"`
	PayloadDigest string    `json:"payload_digest,omitempty"`
	MIME          string    `json:"mime,omitempty"`
	Size          int64     `json:"size,omitempty"`
	Width         int       `json:"width,omitempty"`
	Height        int       `json:"height,omitempty"`
	Vector        []float64 `json:"vector,omitempty"`
	Fingerprint   string    `json:"fingerprint,omitempty"`
	Source        string    `json:"source,omitempty"`
	Tool          string    `json:"tool,omitempty"`
	Scene         string    `json:"scene,omitempty"`
	SemanticType  string    `json:"semantic_type,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// DocV3 (internal/memory/document/document.go @6d38a164).
type DocV3 struct {
	ID          string             `json:"id"`
	Summary     string             `json:"summary"`
	Content     string             `json:"content"`
	Tags        []string           `json:"tags"`
	Entities    []string           `json:"entities"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	Source      string             `json:"source"`
	Meta        map[string]string  `json:"meta,omitempty"`
	AccessCount int                `json:"access_count"`
	LastAccess  time.Time          `json:"last_access"`
	Blocks      []MemoryBlock      `json:"blocks,omitempty"`
	Vector      map[string]float64 `json:"vector,omitempty"`
	DenseVec    []float64          `json:"dense_vec,omitempty"`
	DenseFP     string             `json:"dense_fp,omitempty"`
}

// DocV2 (@020b4ad7, "media digests").
type DocV2 struct {
	ID          string             `json:"id"`
	Summary     string             `json:"summary"`
	Content     string             `json:"content"`
	Tags        []string           `json:"tags"`
	Entities    []string           `json:"entities"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	Source      string             `json:"source"`
	Meta        map[string]string  `json:"meta,omitempty"`
	AccessCount int                `json:"access_count"`
	LastAccess  time.Time          `json:"last_access"`
	Media       []string           `json:"media,omitempty"`
	Vector      map[string]float64 `json:"vector,omitempty"`
	DenseVec    []float64          `json:"dense_vec,omitempty"`
}

type ToolResult struct {
	Name   string `json:"name"`
	Output string `json:"output"`
}

// ContextEvent (internal/agent/core/context.go @6d38a164: blocks replace v1.2's media).
type ContextEvent struct {
	ID          string        `json:"id,omitempty"`
	Timestamp   time.Time     `json:"timestamp"`
	Source      string        `json:"source"`
	Input       string        `json:"input"`
	Response    string        `json:"response,omitempty"`
	ToolsUsed   []string      `json:"tools_used,omitempty"`
	ToolResults []ToolResult  `json:"tool_results,omitempty"`
	Blocks      []MemoryBlock `json:"blocks,omitempty"`
}

type result struct {
	File      string `json:"file"`
	Version   string `json:"version,omitempty"`
	SameBytes bool   `json:"same_bytes"`
	Events    int    `json:"events,omitempty"`
	Error     string `json:"error,omitempty"`
}

func strict(raw []byte, v interface{}) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func main() {
	dir := os.Args[1]
	out := json.NewEncoder(os.Stdout)
	failed := false
	names, _ := filepath.Glob(filepath.Join(dir, "documents", "*.json"))
	sort.Strings(names)
	for _, path := range names {
		rel, _ := filepath.Rel(dir, path)
		raw, err := os.ReadFile(path)
		r := result{File: rel}
		var v3 DocV3
		var v2 DocV2
		if err != nil {
			r.Error = err.Error()
		} else if err3 := strict(raw, &v3); err3 == nil && v3.ID != "" {
			r.Version = "v3"
			again, _ := json.MarshalIndent(&v3, "", "  ")
			r.SameBytes = bytes.Equal(again, raw)
		} else if err2 := strict(raw, &v2); err2 == nil && v2.ID != "" {
			r.Version = "v2"
			again, _ := json.MarshalIndent(&v2, "", "  ")
			r.SameBytes = bytes.Equal(again, raw)
		} else {
			r.Error = fmt.Sprintf("v3: %v; v2: %v", err3, err2)
		}
		if r.Error != "" {
			failed = true
		}
		out.Encode(r)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "context.json"))
	r := result{File: "context.json"}
	var events []ContextEvent
	if err != nil {
		r.Error = err.Error()
	} else if err := strict(raw, &events); err != nil {
		r.Error = err.Error()
	} else {
		again, _ := json.Marshal(events)
		r.SameBytes, r.Events = bytes.Equal(again, raw), len(events)
	}
	if r.Error != "" {
		failed = true
	}
	out.Encode(r)
	if failed {
		os.Exit(1)
	}
}

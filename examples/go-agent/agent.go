// agent.go: the agent loop against an OpenAI-compatible Chat Completions endpoint, with one execute_code tool.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const systemPrompt = "You are a careful assistant with an execute_code tool that runs code in a sandbox. " +
	"When a question needs computation, write code and run it with the tool, and base your answer on the output " +
	"it returns. Never make up, predict or simulate the output of code: if the tool fails or times out, say so."

// Config names the model endpoint (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).
type Config struct {
	BaseURL, APIKey, Model string
	MaxTurns, ModelRetries int
}

// ConfigFromEnv reads the endpoint from the environment.
func ConfigFromEnv() Config {
	c := Config{BaseURL: os.Getenv("OPENAI_BASE_URL"), APIKey: os.Getenv("OPENAI_API_KEY"),
		Model: os.Getenv("OPENAI_MODEL"), MaxTurns: 8, ModelRetries: 3}
	if c.BaseURL == "" {
		c.BaseURL = "https://api.openai.com/v1"
	}
	if c.Model == "" {
		c.Model = "gpt-4o-mini"
	}
	return c
}

type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

var tools = []interface{}{map[string]interface{}{"type": "function", "function": map[string]interface{}{
	"name": "execute_code",
	"description": "Run code in an isolated sandbox and return its combined stdout and stderr with the exit code. " +
		"Use it for any computation; the tool is run once per call and never retried.",
	"parameters": map[string]interface{}{"type": "object", "required": []string{"language", "code"},
		"properties": map[string]interface{}{
			"language": map[string]interface{}{"type": "string", "enum": []string{"python", "bash"}},
			"code":     map[string]interface{}{"type": "string"}}}}}}

func text(s string) *string { return &s }

// RunAgent runs the loop until the model answers in text. The model call is retried (it has no side
// effects); a tool call runs at most once (max attempts 1: never silently re-run side-effectful code).
func RunAgent(ctx context.Context, cfg Config, runtime SandboxRuntime, prompt string) (string, error) {
	messages := []message{{Role: "system", Content: text(systemPrompt)}, {Role: "user", Content: text(prompt)}}
	for turn := 0; turn < cfg.MaxTurns; turn++ {
		reply, err := callModel(ctx, cfg, messages)
		if err != nil {
			return "", err
		}
		messages = append(messages, reply)
		if len(reply.ToolCalls) == 0 {
			if reply.Content == nil {
				return "", errors.New("the model answered with neither text nor a tool call")
			}
			return *reply.Content, nil
		}
		for _, call := range reply.ToolCalls {
			messages = append(messages, message{Role: "tool", ToolCallID: call.ID,
				Content: text(runTool(ctx, runtime, call))})
		}
	}
	return "", fmt.Errorf("no answer after %d turns", cfg.MaxTurns)
}

// runTool runs one tool call once, under its own time-out, and formats what really happened.
func runTool(ctx context.Context, runtime SandboxRuntime, call toolCall) string {
	var args struct{ Language, Code string }
	if call.Function.Name != "execute_code" {
		return "error: unknown tool " + call.Function.Name
	}
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || args.Language == "" {
		return "error: execute_code needs the arguments language and code"
	}
	toolCtx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	res, err := runtime.Execute(toolCtx, args.Language, args.Code)
	if err != nil {
		return "error: the code did not run to completion: " + err.Error()
	}
	return fmt.Sprintf("exit_code: %d\noutput:\n%s", res.ExitCode, res.Output)
}

// callModel sends the conversation, retrying a failed call (5xx, 429, no answer) with a back-off.
func callModel(ctx context.Context, cfg Config, messages []message) (message, error) {
	body, _ := json.Marshal(map[string]interface{}{"model": cfg.Model, "messages": messages, "tools": tools})
	var last error
	for attempt := 0; attempt <= cfg.ModelRetries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return message{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		reply, retry, err := postChat(ctx, cfg, body)
		if err == nil {
			return reply, nil
		}
		if last = err; !retry {
			break
		}
	}
	return message{}, last
}

func postChat(ctx context.Context, cfg Config, body []byte) (message, bool, error) {
	callCtx, cancel := context.WithTimeout(ctx, modelTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(callCtx, "POST", strings.TrimRight(cfg.BaseURL, "/")+"/chat/completions",
		bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return message{}, ctx.Err() == nil, fmt.Errorf("model call: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		retry := resp.StatusCode == 429 || resp.StatusCode >= 500
		return message{}, retry, fmt.Errorf("model call: HTTP %d: %.200s", resp.StatusCode, data)
	}
	var out struct {
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return message{}, false, fmt.Errorf("model call: undecodable answer: %.200s", data)
	}
	return out.Choices[0].Message, false, nil
}

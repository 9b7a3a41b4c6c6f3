// agent_test.go: the example agent against a scripted OpenAI-compatible server and a real `nsbox serve`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	nsbox "nsbox.dev/client"
)

const primeCode = "open('count.txt', 'a').write('x')\n" +
	"n, c = 0, 1\nwhile n < 1000:\n    c += 1\n    n += all(c % d for d in range(2, int(c ** 0.5) + 1))\nprint(c)\n"

func startServe(t *testing.T) *nsbox.Client {
	bin := os.Getenv("NSBOX_BIN")
	if bin == "" {
		bin = "../../build/src/nsbox"
	}
	if err := exec.Command(bin, "serve", "--help").Run(); err != nil {
		t.Skipf("this nsbox (%s) has no serve command: %v", bin, err)
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, "api.sock")
	cmd := exec.Command(bin, "serve", "--socket", socket, "--state-dir", filepath.Join(dir, "state"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	c, _ := nsbox.NewClient("unix://"+socket, "")
	for i := 0; i < 100 && c.Healthz(context.Background()) != nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// scripted plays: a tool call first; the request carrying the tool result fails once with 500, and the
// retry is answered with what the tool really printed.
type scripted struct {
	mu          sync.Mutex
	failedOnce  bool
	toolResults []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []message `json:"messages"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil ||
		!strings.Contains(*req.Messages[0].Content, "Never make up") {
		http.Error(w, "bad request", 400)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	var reply map[string]interface{}
	if last.Role == "user" {
		args, _ := json.Marshal(map[string]string{"language": "python", "code": primeCode})
		reply = map[string]interface{}{"role": "assistant", "content": nil, "tool_calls": []interface{}{
			map[string]interface{}{"id": "call_1", "type": "function",
				"function": map[string]string{"name": "execute_code", "arguments": string(args)}}}}
	} else {
		s.toolResults = append(s.toolResults, *last.Content)
		if !s.failedOnce {
			s.failedOnce = true
			http.Error(w, `{"error": {"message": "overloaded"}}`, 500)
			return
		}
		out := strings.TrimSpace(strings.SplitN(*last.Content, "output:\n", 2)[1])
		reply = map[string]interface{}{"role": "assistant", "content": "The 1000th prime is " + out + "."}
	}
	_ = json.NewEncoder(w).Encode(map[string]interface{}{"choices": []interface{}{
		map[string]interface{}{"index": 0, "message": reply, "finish_reason": "stop"}}})
}

func TestAgentAnswersFromARealRunAndRunsTheToolOnceDespiteARetry(t *testing.T) {
	client := startServe(t)
	model := &scripted{}
	server := httptest.NewServer(model)
	defer server.Close()
	t.Setenv("OPENAI_BASE_URL", server.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "test-key")
	runtime, _ := nsbox.NewRuntime(nsbox.RuntimeOptions{Client: client})
	defer runtime.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	answer, err := RunAgent(ctx, ConfigFromEnv(), runtime, "What is the 1000th prime number?")
	if err != nil || !strings.Contains(answer, "7919") {
		t.Fatalf("answer %q, %v; want 7919", answer, err)
	}
	if !model.failedOnce || len(model.toolResults) != 2 || model.toolResults[0] != model.toolResults[1] {
		t.Fatalf("model saw tool results %q; want the same one twice (a failure, then the retry)", model.toolResults)
	}
	sbx, _ := runtime.Sandbox(ctx)
	count, err := sbx.Files().Read(ctx, "count.txt")
	if err != nil || string(count) != "x" {
		t.Fatalf("count.txt %q, %v; want the tool run exactly once", count, err)
	}
	fmt.Println(answer)
}

// main.go: an agent with an execute_code tool backed by nsbox; the only file that changes to swap runtimes.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	nsbox "nsbox.dev/client"
)

// ExecutionResult is the reference pattern's type; aliased so nsbox.Runtime is a drop-in SandboxRuntime.
type ExecutionResult = nsbox.ExecutionResult

// SandboxRuntime is the reference pattern's interface: one implementation per environment.
type SandboxRuntime interface {
	Execute(ctx context.Context, language, code string) (ExecutionResult, error)
}

// The three time-out layers: the whole run, each model call, and each tool call (which nsbox turns into the
// program's own time-out, killing it in the sandbox).
const (
	runTimeout   = 5 * time.Minute
	modelTimeout = 60 * time.Second
	toolTimeout  = 30 * time.Second
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-agent PROMPT  (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL; NSBOX_URL)")
		os.Exit(2)
	}
	// The one line to change when swapping runtimes: one nsbox sandbox for the conversation.
	runtime, err := nsbox.NewRuntime(nsbox.RuntimeOptions{Sandbox: nsbox.SandboxOptions{Network: &nsbox.NetworkNone,
		Limits: &nsbox.Limits{Memory: "256M", Pids: 64}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-agent:", err)
		os.Exit(1)
	}
	defer runtime.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	answer, err := RunAgent(ctx, ConfigFromEnv(), runtime, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-agent:", err)
		os.Exit(1)
	}
	fmt.Println(answer)
}

// nsbox_test.go: the Go client against a real `nsbox serve` on a private socket ($NSBOX_BIN).
package nsbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const primeCode = `def nth_prime(n):
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            count += 1
    return candidate
print(nth_prime(1000))
`

// startServe runs `nsbox serve` on a private socket and state dir; it skips (with the reason) when this
// nsbox has no serve command.
func startServe(t *testing.T) *Client {
	t.Helper()
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
		t.Fatalf("start nsbox serve: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	c, err := NewClient("unix://"+socket, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if c.Healthz(context.Background()) == nil {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nsbox serve did not answer on %s", socket)
	return nil
}

func TestExecuteComputesThe1000thPrime(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t), FreshSandboxPerCall: true})
	res, err := rt.Execute(context.Background(), "python", primeCode)
	if err != nil || strings.TrimSpace(res.Output) != "7919" || res.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want 7919, exit 0", res, err)
	}
}

func TestNonZeroExitIsAResultWithStderrInOutput(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t), FreshSandboxPerCall: true})
	res, err := rt.Execute(context.Background(), "python", "import sys\nprint('before')\nsys.exit(3)\n")
	if err != nil || res.ExitCode != 3 || !strings.Contains(res.Output, "before") {
		t.Fatalf("got %+v, %v; want exit 3 with its output", res, err)
	}
	res, err = rt.Execute(context.Background(), "python", "raise ValueError('boom')")
	if err != nil || res.ExitCode != 1 || !strings.Contains(res.Output, "ValueError: boom") {
		t.Fatalf("got %+v, %v; want exit 1 with the traceback", res, err)
	}
}

func countSandboxes(t *testing.T, c *Client) int {
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return len(list)
}

func TestDeadlineShorterThanTheProgramKillsItWithATimeOut(t *testing.T) {
	c := startServe(t)
	rt, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := rt.Execute(ctx, "python", "import time\ntime.sleep(60)\n")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "time-out") {
		t.Fatalf("got %+v, %v; want a time-out error", res, err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("Execute returned only after %v", time.Since(start))
	}
	if n := countSandboxes(t, c); n != 0 {
		t.Fatalf("%d sandboxes left after the time-out", n)
	}
}

func TestCancellationEndsTheRun(t *testing.T) {
	c := startServe(t)
	rt, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	_, err := rt.Execute(ctx, "python", "import time\ntime.sleep(60)\n")
	if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want a cancellation error", err)
	}
	if n := countSandboxes(t, c); n != 0 {
		t.Fatalf("%d sandboxes left after the cancellation", n)
	}
}

func Test32GoroutinesEachGetTheirOwnResult(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t)})
	defer rt.Close(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := rt.Execute(context.Background(), "python", fmt.Sprintf("print(%d * 1000 + 7)", i))
			if want := fmt.Sprint(i*1000 + 7); err != nil || strings.TrimSpace(res.Output) != want {
				errs <- fmt.Errorf("call %d: got %+v, %v; want %s", i, res, err, want)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStatePersistsInOneSandboxAndNotAcrossFreshOnes(t *testing.T) {
	c := startServe(t)
	ctx := context.Background()
	write := "open('state.txt', 'w').write('kept')"
	read := "import os\nprint(open('state.txt').read() if os.path.exists('state.txt') else 'absent')"
	one, _ := NewRuntime(RuntimeOptions{Client: c})
	defer one.Close(ctx)
	if _, err := one.Execute(ctx, "python", write); err != nil {
		t.Fatal(err)
	}
	if res, err := one.Execute(ctx, "python", read); err != nil || strings.TrimSpace(res.Output) != "kept" {
		t.Fatalf("one sandbox: got %+v, %v; want kept", res, err)
	}
	fresh, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	if _, err := fresh.Execute(ctx, "python", write); err != nil {
		t.Fatal(err)
	}
	if res, err := fresh.Execute(ctx, "python", read); err != nil || strings.TrimSpace(res.Output) != "absent" {
		t.Fatalf("fresh sandboxes: got %+v, %v; want absent", res, err)
	}
}

// smallSandbox is a sandbox without network, of 256M and 64 pids, on a server of its own; it ends with the test.
func smallSandbox(t *testing.T, ctx context.Context) *Sandbox {
	t.Helper()
	s, err := startServe(t).Create(ctx, SandboxOptions{Network: &NetworkNone, Limits: &Limits{Memory: "256M", Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Terminate(context.Background()) })
	return s
}

func TestFilesAndStreamingExec(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	if err := s.Files().Write(ctx, "sub/in.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	var chunks []string
	res, err := s.Exec(ctx, ExecRequest{Cmd: "cat sub/in.txt; echo; echo err >&2",
		OnStdout: func(c string) { chunks = append(chunks, c) }})
	if err != nil || res.Stdout != "hello\n" || strings.Join(chunks, "") != "hello\n" {
		t.Fatalf("got %+v, %v, chunks %q", res, err, chunks)
	}
	if _, err := s.Files().Read(ctx, "missing.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a missing file: %v; want ErrNotFound", err)
	}
	if err := s.Files().Remove(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
}

func TestACompiledLanguagesCompileStepHasItsOwnLimits(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	res, err := s.Exec(ctx, ExecRequest{Language: "c", Code: "int main(void) { return 4; }",
		CompileTimeout: 30 * time.Second, CompileMemory: "128M"})
	if err != nil || res.Status != "exit" || res.ExitCode == nil || *res.ExitCode != 4 {
		t.Fatalf("got %+v, %v; want exit 4", res, err)
	}
	res, err = s.Exec(ctx, ExecRequest{Language: "cpp", Code: "#include <iostream>\nint main() { std::cout << 1; }",
		CompileMemory: "16M"})
	compile, _ := res.Raw["compile"].(map[string]interface{})
	if err != nil || res.Status != "compile_error" || compile["status"] != "oom" {
		t.Fatalf("got %+v, %v; want compile_error with the compile step oom", res, err)
	}
	if _, err := s.Exec(ctx, ExecRequest{Language: "python", Code: "1", CompileMemory: "64M"}); err == nil ||
		!strings.Contains(err.Error(), "compile_memory") {
		t.Fatalf("compile_memory for python: %v; want a refusal naming it", err)
	}
}

func TestServerGoneIsTyped(t *testing.T) {
	c, _ := NewClient("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
	_, err := c.Create(context.Background(), SandboxOptions{})
	if !errors.Is(err, ErrServerGone) {
		t.Fatalf("got %v; want ErrServerGone", err)
	}
}

func TestURLsTheClientCannotServeAreRefusedWhenItIsMade(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:1,http://127.0.0.1:2", "unix://tmp/api.sock"} {
		if c, err := NewClient(raw, ""); err == nil {
			t.Fatalf("NewClient(%q) = %v; want an error", raw, c)
		}
	}
}

func TestAStreamedErrorLineIsTypedByItsCode(t *testing.T) {
	for code, want := range map[string]error{"conflict": ErrConflict, "not_found": ErrNotFound,
		"bad_request": ErrRefused, "too_many_requests": ErrCapacityFull, "setup_failed": ErrSetupFailed} {
		if got := kindOfStatus(0, code); got != want {
			t.Fatalf("kindOfStatus(0, %q) = %v; want %v", code, got, want)
		}
	}
}

package main

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeRun_CtrlC_ServerExitsCleanlyMakeReportsNoError runs `make run` as
// a terminal would, in a process group of its own, and presses Ctrl-C:
// SIGINT to the whole group. paymentsd must close its data file and exit
// 0, so that make reports no error. (make itself then dies of the SIGINT it
// was sent too, as every interrupted make does: the shell sees 130.)
func TestMakeRun_CtrlC_ServerExitsCleanlyMakeReportsNoError(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary through make")
	}
	db := filepath.Join(t.TempDir(), "paymentsd.db")
	cmd := exec.Command("make", "--no-print-directory", "-C", "../../..", "run",
		"ARGS=--listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --db "+db)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log []string
	timeout := time.After(2 * time.Minute)
	for listening := false; !listening; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("make run ended before paymentsd listened:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			listening = strings.Contains(l, `"paymentsd listening"`)
		case <-timeout:
			t.Fatalf("paymentsd did not listen within 2 minutes:\n%s", strings.Join(log, "\n"))
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	for l := range lines {
		log = append(log, l)
	}
	cmd.Wait()
	all := strings.Join(log, "\n")
	if !strings.Contains(all, `"msg":"closed"`) {
		t.Errorf("paymentsd did not close cleanly on Ctrl-C:\n%s", all)
	}
	if strings.Contains(all, "make: ***") {
		t.Errorf("make reported an error on Ctrl-C:\n%s", all)
	}
}

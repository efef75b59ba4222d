package process

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a program the harness runs, with its output kept for the test to read.
type Process struct {
	cmd      *exec.Cmd
	logs     *SyncBuffer
	exited   chan struct{}
	exitCode int
}

// StartProcess starts cmd, capturing stdout and stderr.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	p := &Process{cmd: cmd, logs: &SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p, nil
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitCode is the exit status, valid once Exited is closed; -1 when killed by a signal.
func (p *Process) ExitCode() int { return p.exitCode }

// Logs is everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string { return p.logs.String() }

// Stop kills the process if it still runs and waits for it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Terminate sends SIGTERM, waits up to grace, then kills.
func (p *Process) Terminate(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Stop()
	}
}

// WaitExit waits up to timeout for the process to exit and reports whether it did.
func (p *Process) WaitExit(ctx context.Context, timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	case <-ctx.Done():
		return false
	}
}

// RSSBytes is the process's resident set size from /proc.
func (p *Process) RSSBytes() (int64, error) { return RSSBytes(p.Pid()) }

// PrivateBytes is the process's anonymous resident memory from /proc: its RSS without the pages of its
// binary, which every process running the same file shares through the page cache.
func (p *Process) PrivateBytes() (int64, error) { return procStatusBytes(p.Pid(), "RssAnon") }

// CPUTime is the CPU time the process has used, user and system.
func (p *Process) CPUTime() (time.Duration, error) { return CPUTime(p.Pid()) }

// RSSBytes is the resident set size of the process pid.
func RSSBytes(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux architecture Go
// supports.
const userHZ = 100

// CPUTime is the CPU time, user and system, the process pid has spent so far.
func CPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ... utime stime: comm may hold spaces, so count the fields after its ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime and stime, fields 14 and 15 of the line
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// procStatusBytes reads one "<field>: <n> kB" line of /proc/<pid>/status.
func procStatusBytes(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// SyncBuffer is a bytes.Buffer that one goroutine writes (a process, a command) while another reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Package grpcslog sends grpc-go's own log lines through a slog.Logger.
// These are transport errors and, with GRPC_GO_LOG_SEVERITY_LEVEL lower,
// its info. A process that logs JSON thus logs nothing else. By default,
// grpc-go prints plain text to stderr.
package grpcslog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/grpclog"
)

// Logger is a grpclog.LoggerV2 over a slog.Logger.
type Logger struct {
	logger    *slog.Logger
	min       slog.Level // lines below it are dropped
	verbosity int
}

// New returns a Logger writing to logger at the severity and verbosity
// that grpc-go's own variables ask for. They are GRPC_GO_LOG_SEVERITY_LEVEL
// and GRPC_GO_LOG_VERBOSITY_LEVEL. The severity is info, warning or error,
// and error when unset, as grpc-go has it.
func New(logger *slog.Logger) *Logger {
	l := &Logger{logger: logger.With("system", "grpc"), min: slog.LevelError}
	switch strings.ToLower(os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL")) {
	case "info":
		l.min = slog.LevelInfo
	case "warning":
		l.min = slog.LevelWarn
	}
	l.verbosity, _ = strconv.Atoi(os.Getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	return l
}

// Install makes logger grpc-go's. Call it before any other gRPC use.
func Install(logger *slog.Logger) { grpclog.SetLoggerV2(New(logger)) }

func (l *Logger) log(level slog.Level, msg string) {
	if level >= l.min {
		l.logger.Log(context.Background(), level, strings.TrimSuffix(msg, "\n"))
	}
}

// Info and the methods below log at their severity, as
// grpclog.LoggerV2 has them.
func (l *Logger) Info(args ...any)   { l.log(slog.LevelInfo, fmt.Sprint(args...)) }
func (l *Logger) Infoln(args ...any) { l.log(slog.LevelInfo, fmt.Sprintln(args...)) }
func (l *Logger) Infof(format string, args ...any) {
	l.log(slog.LevelInfo, fmt.Sprintf(format, args...))
}
func (l *Logger) Warning(args ...any)   { l.log(slog.LevelWarn, fmt.Sprint(args...)) }
func (l *Logger) Warningln(args ...any) { l.log(slog.LevelWarn, fmt.Sprintln(args...)) }
func (l *Logger) Warningf(format string, args ...any) {
	l.log(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (l *Logger) Error(args ...any)   { l.log(slog.LevelError, fmt.Sprint(args...)) }
func (l *Logger) Errorln(args ...any) { l.log(slog.LevelError, fmt.Sprintln(args...)) }
func (l *Logger) Errorf(format string, args ...any) {
	l.log(slog.LevelError, fmt.Sprintf(format, args...))
}

// Fatal logs at error level and exits 1, as grpclog's Fatal must.
func (l *Logger) Fatal(args ...any) { l.fatal(fmt.Sprint(args...)) }

// Fatalln is Fatal with fmt.Sprintln's spacing.
func (l *Logger) Fatalln(args ...any) { l.fatal(fmt.Sprintln(args...)) }

// Fatalf is Fatal with a format.
func (l *Logger) Fatalf(format string, args ...any) { l.fatal(fmt.Sprintf(format, args...)) }

func (l *Logger) fatal(msg string) {
	l.logger.Error(strings.TrimSuffix(msg, "\n"))
	os.Exit(1)
}

// V reports whether verbosity level v is logged.
func (l *Logger) V(v int) bool { return v <= l.verbosity }

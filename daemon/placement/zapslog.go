package placement

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zap logger for the etcd client that writes through log.
// Without one the client builds its own, which writes lines to stderr that
// are not the daemon's JSON.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zap.New(slogCore{log: log.With("component", "etcd-client")})
}

// slogCore is a zapcore.Core that hands each entry to a slog.Logger, at
// the matching level, with its fields as attributes.
type slogCore struct {
	log   *slog.Logger
	attrs []slog.Attr // from With
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	c.attrs = append(slices.Clip(c.attrs), attrs(fields)...)
	return c
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrs(fields)...)
	return c.log.Handler().Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

// attrs turns zap fields into slog attributes, in the fields' order.
func attrs(fields []zapcore.Field) []slog.Attr {
	out := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields {
			out = append(out, slog.Any(k, v))
		}
	}
	return out
}

// slogLevel maps zap's levels to slog's; DPanic and above are errors.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

package cron

import (
	"testing"
	"time"
)

// BenchmarkCronNext: the cost of one next run, for an every-minute job
// (the most candidates to look at) and a weekday job.
func BenchmarkCronNext(b *testing.B) {
	for _, expr := range []string{"* * * * *", "0 9 * * 1-5"} {
		s, err := ParseSchedule(KindCron, expr, "Europe/Paris")
		if err != nil {
			b.Fatal(err)
		}
		now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
		b.Run(expr, func(b *testing.B) {
			for b.Loop() {
				if _, ok := s.Next(now, now); !ok {
					b.Fatal("no next run")
				}
			}
		})
	}
}

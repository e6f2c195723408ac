/*
 * metrics.h - the counters and latency histograms of every tickbus process
 * on this host in the Prometheus text exposition format (version 0.0.4,
 * which OpenMetrics parsers read as well): what `tb-stat --prometheus`
 * writes for node-exporter's textfile collector and `tb-stat --listen`
 * serves on /metrics.
 *
 * Families (every sample labelled pid, process; stream samples also stream,
 * stream_id, role, transport):
 *   tickbus_<counter>_total          counter, one per tb_counter_id_t
 *   tickbus_latency_seconds          histogram, label `name` (the exported
 *                                    histogram's), buckets le=2^(i+6) ns
 *   tickbus_heartbeat_age_seconds    gauge, -1 when never beaten
 *   tickbus_process_start_time_seconds  gauge
 *   tickbus_mr_bytes                 gauge, per registration (use, access)
 *   tickbus_processes                gauge, processes seen
 *   tickbus_stale_files_reaped       gauge, files of dead processes removed
 *                                    by this reading
 * Every family is written once, its samples together, as the format wants,
 * even when several processes export a histogram of the same name.
 */
#ifndef TB_STAT_METRICS_H
#define TB_STAT_METRICS_H

#include "bus/counters.h"

#include <stdint.h>
#include <stdio.h>

/* Writes the exposition of `n` processes to `out`; `now_ns` is
 * CLOCK_REALTIME of the reading.  Returns 0, or -1 when `out` failed. */
int tb_stat_metrics_write(FILE *out, tb_counters_proc_t *const *procs, int n,
			  uint64_t now_ns, int reaped);

#endif

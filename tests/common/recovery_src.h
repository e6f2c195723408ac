/*
 * recovery_src.h - a recovery service inside the test's own process: a
 * tb_recovery_server on 127.0.0.1 whose source holds sequences
 * first..last of one epoch, each frame made on demand by the test (by
 * default frames_put with frames_fill_seq's payload), optionally slow to
 * give its first answer so that more requests can queue behind it.
 */
#ifndef TB_TEST_RECOVERY_SRC_H
#define TB_TEST_RECOVERY_SRC_H

#include "bus/recovery/server.h"
#include "tests/common/frames.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

/* The largest payload a recovery_src frame may carry. */
#define RECOVERY_SRC_PAYLOAD_MAX 256

typedef struct recovery_src {
	uint32_t stream_id;
	uint64_t epoch, first, last; /* what it holds ([0, 0]: nothing yet) */
	/* Writes the frame of `seq` at `buf` (TB_FRAME_HDR_LEN +
	 * RECOVERY_SRC_PAYLOAD_MAX bytes, 8-byte aligned); NULL: frames_put
	 * of `payload` bytes, template 1, publish_ns 1. */
	void (*frame)(const struct recovery_src *s, uint8_t *buf, uint64_t seq);
	uint32_t payload;
	uint32_t first_read_delay_ms; /* the first read waits this long */
	int reads;                    /* reads so far */
} recovery_src_t;

static inline void recovery_src_bounds(void *sd, uint64_t *epoch,
				       uint64_t *first, uint64_t *last)
{
	const recovery_src_t *s = sd;

	*epoch = s->epoch;
	*first = s->first;
	*last = s->last;
}

/* As tb_store_read: up to `max` frames from `first` to `fn`. */
static inline int recovery_src_read(void *sd, uint64_t first, int max,
				    tb_store_read_fn fn, void *cd)
{
	recovery_src_t *s = sd;
	uint64_t buf[(TB_FRAME_HDR_LEN + RECOVERY_SRC_PAYLOAD_MAX) / 8];
	int n = 0;

	if (s->reads++ == 0 && s->first_read_delay_ms) {
		struct timespec ts = {s->first_read_delay_ms / 1000,
				      (long)(s->first_read_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	if (first < s->first)
		return TB_STORE_TOO_OLD;
	if (first > s->last)
		return TB_STORE_NOT_YET;
	for (uint64_t q = first; q <= s->last && n < max; q++) {
		if (s->frame)
			s->frame(s, (uint8_t *)buf, q);
		else
			frames_put(buf, s->stream_id, q, s->payload, 1, 1, NULL);
		n++;
		if (fn(cd, (const tb_frame_hdr_t *)buf))
			break;
	}
	return n;
}

/* Opens a service of `s` on 127.0.0.1, any free port
 * (tb_recovery_server_port), with `token`; `cfg` NULL for the defaults.
 * Returns 0 or the code of tb_recovery_server_open. */
static inline int recovery_src_serve(tb_recovery_server_t **srv,
				     recovery_src_t *s, const char *token,
				     const tb_recovery_server_cfg_t *cfg)
{
	tb_recovery_server_source_t src = {.stream_id = s->stream_id,
					   .token = token,
					   .bounds = recovery_src_bounds,
					   .read = recovery_src_read, .sd = s};
	tb_recovery_server_cfg_t c;

	if (cfg)
		c = *cfg;
	else
		tb_recovery_server_cfg_init(&c);
	return tb_recovery_server_open(srv, &c, &src, 1);
}

#endif

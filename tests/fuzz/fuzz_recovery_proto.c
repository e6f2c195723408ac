/*
 * fuzz_recovery_proto.c - libFuzzer target for the recovery protocol
 * decoder and the checks on the frames inside a response.
 *
 * `make fuzz` builds it with libFuzzer and runs it (see the Makefile's
 * top); `make test` replays its corpus, tests/fuzz/corpus/recovery_proto/,
 * through it (tests/fuzz/replay.c).
 *
 * The input is read twice: as a protocol message (decode; whatever decodes
 * must re-encode to the same bytes) and, from its second byte so that it
 * is misaligned, as a replayed tickbus frame (replay_need and
 * replay_check must agree and never read past the input).
 */
#include "bus/error.h"
#include "bus/recovery/proto.h"

#include <stdlib.h>
#include <string.h>

static int reencode(const tb_recovery_proto_msg_t *m, uint8_t *buf, size_t cap)
{
	switch (m->type) {
	case TB_RECOVERY_PROTO_REQUEST:
		return tb_recovery_proto_encode_request(buf, cap, &m->request);
	case TB_RECOVERY_PROTO_RESPONSE_BEGIN:
		return tb_recovery_proto_encode_begin(buf, cap, &m->begin);
	case TB_RECOVERY_PROTO_RESPONSE_END:
		return tb_recovery_proto_encode_end(buf, cap, &m->end);
	case TB_RECOVERY_PROTO_REJECT:
		return tb_recovery_proto_encode_reject(buf, cap, &m->reject);
	case TB_RECOVERY_PROTO_HELLO:
		return tb_recovery_proto_encode_hello(buf, cap, &m->hello);
	case TB_RECOVERY_PROTO_WELCOME:
		return tb_recovery_proto_encode_welcome(buf, cap, &m->welcome);
	}
	return -1;
}

static void as_message(const uint8_t *data, size_t size)
{
	uint8_t again[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_msg_t m;
	int need, rc;

	need = tb_recovery_proto_frame_need(data, size);
	if (need > 0 && size + (size_t)need > TB_RECOVERY_PROTO_MSG_MAX)
		abort();
	rc = tb_recovery_proto_decode(data, size, &m);
	if (rc < 0) {
		if (rc != TB_EPROTO && rc != TB_EFORMAT)
			abort();
		return;
	}
	if ((size_t)rc > size || need != 0)
		abort();
	if (reencode(&m, again, sizeof(again)) != rc ||
	    memcmp(again, data, (size_t)rc) != 0)
		abort();
}

static void as_frame(const uint8_t *data, size_t size)
{
	/* A response announcing frames of stream 1 from sequence 1. */
	const tb_recovery_proto_begin_t begin = {.stream_id = 1, .count = 16,
					 .epoch = 1, .first = 1};
	int need;
	int64_t n;

	if (size < 2)
		return;
	data++, size--;
	need = tb_recovery_proto_replay_need(data, size);
	n = tb_recovery_proto_replay_check(data, size, &begin, data[0] % 20);
	if (n > 0 && (need != 0 || (size_t)n > size))
		abort();
	if (need > 0 && size + (size_t)need > TB_FRAME_MAX_LEN)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_message(data, size);
	as_frame(data, size);
	return 0;
}

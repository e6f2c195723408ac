/*
 * fuzz_control.c - libFuzzer target for the control protocol decoder.
 *
 * `make fuzz` builds it with libFuzzer and runs it (see the Makefile's
 * top); `make test` replays its corpus, tests/fuzz/corpus/control/, through
 * it (tests/fuzz/replay.c).
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - decode either fails with TB_EPROTO / TB_EFORMAT or returns a length
 *     within the input;
 *   - whatever decodes re-encodes to exactly the same bytes (one valid
 *     encoding per message, and the encoder accepts everything the decoder
 *     does);
 *   - the framer never asks for more than TB_CONTROL_MSG_MAX bytes in all, and
 *     says 0 (whole) whenever decode succeeds.
 */
#include "bus/error.h"
#include "bus/transport/control.h"

#include <stdlib.h>
#include <string.h>

static int reencode(const tb_control_msg_t *m, uint8_t *buf, size_t cap)
{
	switch (m->type) {
	case TB_CONTROL_HELLO: return tb_control_encode_hello(buf, cap, &m->hello);
	case TB_CONTROL_SUBSCRIBE:
		return tb_control_encode_subscribe(buf, cap, &m->subscribe);
	case TB_CONTROL_ACCEPT: return tb_control_encode_accept(buf, cap, &m->accept);
	case TB_CONTROL_REJECT: return tb_control_encode_reject(buf, cap, &m->reject);
	case TB_CONTROL_HEARTBEAT:
		return tb_control_encode_heartbeat(buf, cap, &m->heartbeat);
	case TB_CONTROL_BYE: return tb_control_encode_bye(buf, cap, &m->bye);
	case TB_CONTROL_READY: return tb_control_encode_ready(buf, cap, &m->ready);
	}
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t again[TB_CONTROL_MSG_MAX];
	tb_control_msg_t m;
	int need, rc;

	need = tb_control_frame_need(data, size);
	if (need > 0 && size + (size_t)need > TB_CONTROL_MSG_MAX)
		abort();
	rc = tb_control_decode(data, size, &m);
	if (rc < 0) {
		if (rc != TB_EPROTO && rc != TB_EFORMAT)
			abort();
		return 0;
	}
	if ((size_t)rc > size || need != 0)
		abort();
	if (reencode(&m, again, sizeof(again)) != rc ||
	    memcmp(again, data, (size_t)rc) != 0)
		abort();
	/* Token comparison must be reflexive on anything decoded. */
	if (m.type == TB_CONTROL_HELLO &&
	    !tb_control_token_equal(m.hello.token, m.hello.token))
		abort();
	return 0;
}

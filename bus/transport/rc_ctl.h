/*
 * transport/rc_ctl.h - what the two sides of rc share beyond the device
 * (verbs.h): the control connection, one TCP socket (net.h) carrying the
 * control protocol (control.h).  Internal to rc_pub.c and rc_sub.c.
 *
 * Both sides read with tb_rc_ctl_read() from a non-blocking socket through
 * a fixed buffer (no message is longer than TB_CONTROL_MSG_MAX, so a peer
 * can make a reader wait but never allocate), and write whole messages
 * with tb_rc_ctl_send().  Every call here is a system call on a control
 * thread or at set-up; none is on a hot path.
 */
#ifndef TB_TRANSPORT_RC_CTL_H
#define TB_TRANSPORT_RC_CTL_H

#include "bus/clock.h"
#include "bus/net.h"
#include "bus/transport/control.h"

#include <stdint.h>
#include <string.h>

/* How often a control thread looks at its sockets and its state. */
#define TB_RC_CTL_TICK_MS 20
/* A control message (a few hundred bytes) must leave within this; a peer
 * that does not read for so long is broken. */
#define TB_RC_CTL_SEND_MS 1000u

/* A control-protocol reader over one connection. */
typedef struct tb_rc_ctl_in {
	uint8_t buf[TB_CONTROL_MSG_MAX * 2];
	size_t have;
} tb_rc_ctl_in_t;

/*
 * Decodes one message from what `in` holds and the socket brings, waiting
 * up to timeout_ms (0: not at all) for the bytes of a whole one: 1 = *m
 * filled, 0 = not whole yet, TB_CLOSED = the peer closed, other < 0 = a
 * broken peer or connection (message set).
 */
static inline int tb_rc_ctl_read(int fd, tb_rc_ctl_in_t *in,
				 tb_control_msg_t *m, uint32_t timeout_ms)
{
	uint64_t until = timeout_ms ? tb_clock_mono_ns() +
					      (uint64_t)timeout_ms * 1000000u
				    : 0;

	for (;;) {
		int need = in->have ? tb_control_frame_need(in->buf, in->have)
				    : (int)TB_WIRE_HDR_LEN;
		uint32_t left = 0;
		int n;

		if (need < 0)
			return need;
		if (in->have && need == 0) {
			int used = tb_control_decode(in->buf, in->have, m);

			if (used < 0)
				return used;
			memmove(in->buf, in->buf + used, in->have - (size_t)used);
			in->have -= (size_t)used;
			return 1;
		}
		if (until) {
			uint64_t now = tb_clock_mono_ns();

			if (now < until)
				left = (uint32_t)((until - now + 999999u) / 1000000u);
		}
		n = tb_net_recv_some(fd, in->buf + in->have,
				     sizeof(in->buf) - in->have, left);
		if (n <= 0)
			return n;
		in->have += (size_t)n;
	}
}

/* Encodes `m` with `enc` and sends it within TB_RC_CTL_SEND_MS: 0 or a
 * negative code with a message. */
static inline int tb_rc_ctl_send(int fd, int (*enc)(void *, size_t, const void *),
				 const void *m)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	int n = enc(buf, sizeof(buf), m);

	return n < 0 ? n : tb_net_send_all(fd, buf, (size_t)n, TB_RC_CTL_SEND_MS);
}

/* tb_rc_ctl_send of a tb_control_<kind>_t: TB_RC_CTL_SEND(fd, bye, &b). */
#define TB_RC_CTL_SEND(fd, kind, m) \
	tb_rc_ctl_send(fd, (int (*)(void *, size_t, const void *)) \
		       tb_control_encode_##kind, m)

#endif

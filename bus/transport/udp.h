/*
 * transport/udp.h - UDP multicast through the kernel, for hosts without an
 * RDMA NIC.  The datagrams are those of ud (packet.h, packed and checked by
 * dgram.h); only the way bytes move differs.
 *
 * Publisher: a private ring (ring.h) of cfg.ring_size bytes, a UDP socket
 * connected to the group, with IP_MULTICAST_IF (cfg.interface: a local
 * address or a netdev name), IP_MULTICAST_TTL (cfg.ttl) and
 * IP_MULTICAST_LOOP (cfg.loopback).  `send` packs the committed frames
 * (dgram.h, which numbers and signs each datagram with the stream's
 * token: dgram_auth.h) and sends what is ready: sendmmsg for several
 * datagrams, each two iovecs (header, frames in the ring); one datagram
 * alone (one frame without batching goes straight from tb_dgram_tx_one)
 * by send from a copy, header and frames together, when it is at most
 * TB_UDP_COPY_MAX bytes, else by sendmsg with the two iovecs.  sendmsg
 * copies a message header and an iovec array in from user memory that
 * send does not: for a 160-byte datagram here that was 0.14 to 0.27 us
 * of a 4 us send, the copy of 160 bytes a few ns.  Messages larger than
 * one datagram of cfg.mtu bytes (default TB_DGRAM_UDP_MTU) are refused at
 * offer with TB_EMSGSIZE: ring.max_frame is capped to what a datagram
 * holds.  The heartbeat thread sends a heartbeat datagram on the same
 * socket every heartbeat_ms; close sends END three times (a lost END
 * would otherwise turn a clean close into a dead publisher).
 *
 * Subscriber: a non-blocking socket bound to the group address and port
 * with SO_REUSEADDR and SO_REUSEPORT (so several subscribers on one host
 * share it), a membership on the chosen interface, SO_RCVBUF from
 * cfg.rcvbuf (a warning when the kernel caps it at net.core.rmem_max).
 * Poll makes one receive when the previous batch is used up, and nothing
 * else: recv of one datagram while they come one at a time, recvmmsg of
 * up to TB_UDP_RX_BATCH after a receive that found one (a burst may follow)
 * and while batches come back with two or more.  recvmmsg tries for a
 * second datagram in the kernel and copies message headers in and out: a
 * lone datagram costs it 1.07 us against 0.62 for recv here, and an empty
 * poll 0.44 against 0.29.  The datagrams are delivered in place from the
 * receive buffers, each authenticated by dgram.h before anything in it is
 * acted on.
 *
 * No test hook: tests that want datagrams lost wrap the socket calls from
 * outside (tests/common/udp_loss.h, an LD_PRELOAD interposer).
 */
#ifndef TB_TRANSPORT_UDP_H
#define TB_TRANSPORT_UDP_H

#include "bus/transport/dgram.h"
#include "bus/transport/transport.h"

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Datagrams one recvmmsg takes: enough to drain a burst in one system
 * call, small enough that the buffers (64 KiB each, the largest UDP
 * payload) stay at 2 MiB. */
#define TB_UDP_RX_BATCH 32
/* A lone datagram of at most this many bytes is copied whole and sent
 * with send, not gathered by sendmsg: a packet header and 448 bytes of
 * frames, several small messages' worth. */
#define TB_UDP_COPY_MAX 512
#define TB_UDP_RX_BUF 65536

typedef struct tb_udp_tx {
	tb_tx_t tx;              /* first: the ring */
	tb_dgram_tx_t dg;
	int fd;
	uint32_t mtu;
	uint64_t sendmmsg_calls; /* statistics, for tests and benchmarks */
	uint64_t sendmsg_calls;  /* a lone datagram too large to copy */
	uint64_t send_calls;     /* a lone datagram, copied whole */
	uint64_t send_errors;
	uint8_t *ring_mem;
	struct mmsghdr msgs[TB_DGRAM_READY_MAX];
	struct iovec iov[TB_DGRAM_READY_MAX][2];
	uint8_t one[TB_UDP_COPY_MAX]; /* a lone datagram, copied whole */
} tb_udp_tx_t;

typedef struct tb_udp_rx {
	tb_rx_t rx;              /* first: the transport interface */
	tb_dgram_rx_t dg;
	int fd;
	int rcvbuf;              /* what the kernel granted (getsockopt) */
	int got;                 /* datagrams in the current batch */
	int next;                /* the next one to deliver */
	int one;                 /* the next receive takes one datagram
				    (recv into msgs[0]'s buffer), not a batch */
	uint64_t recv_calls;
	uint8_t *bufs;           /* TB_UDP_RX_BATCH * TB_UDP_RX_BUF */
	struct mmsghdr msgs[TB_UDP_RX_BATCH];
	struct iovec iov[TB_UDP_RX_BATCH];
} tb_udp_rx_t;

extern const tb_tx_ops_t tb_udp_tx_ops;
extern const tb_rx_ops_t tb_udp_rx_ops;

#endif

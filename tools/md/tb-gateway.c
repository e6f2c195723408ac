/*
 * tb-gateway - the order-gateway sink: receives orders over UDP
 * (tools/md/gw.h), stamps each arrival with tb_clock_now_ns(),
 * answers an ack carrying the arrival time, and counts.
 *
 * UDP rather than TCP: an order is one datagram and an ack one datagram, no
 * connection state to set up per strategy, and the arrival stamp is taken
 * right after the receive call that returned it.  It waits in poll() by
 * default (a sink on a shared machine must not hog a core); --spin busy-
 * polls instead, for latency runs on a core of its own.
 *
 * Output: "gateway: ready port=P" once listening, then at exit
 *   gateway: orders=N acks=N bad=N bad_size=N bad_magic=N bad_version=N
 *            bad_type=N bad_field=N
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"
#include "tools/md/gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 16

static const char prog[] = "tb-gateway";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-gateway [options]\n"
"Receives orders (tools/md/gw.h) over UDP, acks each with its arrival\n"
"time, and prints the counts at exit.\n"
"options:\n"
"  -b, --bind ADDR     address to listen on (default 127.0.0.1)\n"
"  -p, --port PORT     port, 0 = any free one (default 31010)\n"
"  -n, --count N       exit after N valid orders (default: no limit)\n"
"  -d, --duration SEC  exit after this long (default: no limit)\n"
"      --spin          busy-poll instead of waiting in poll()\n"
"  -h, --help          this text\n"
"SIGINT/SIGTERM: print the counts and exit 0.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"bind", required_argument, 0, 'b'},
		{"port", required_argument, 0, 'p'},
		{"count", required_argument, 0, 'n'},
		{"duration", required_argument, 0, 'd'},
		{"spin", no_argument, 0, 'S'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *bind_addr = "127.0.0.1";
	uint64_t port = 31010, count = 0, duration = 0, orders = 0, acks = 0;
	uint64_t bad[TB_GW_NERR + 1] = {0}, nbad = 0, t0;
	int spin = 0, c, fd, i;
	struct sockaddr_in sa, from[BATCH];
	socklen_t sl = sizeof(sa);
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	uint8_t bufs[BATCH][128];

	while ((c = getopt_long(argc, argv, "b:p:n:d:h", opts, NULL)) != -1) {
		const char *badopt = NULL;

		switch (c) {
		case 'b': bind_addr = optarg; break;
		case 'p': if (tb_cli_u64_c(optarg, &port) || port > 65535) badopt = "--port"; break;
		case 'n': if (tb_cli_u64_c(optarg, &count)) badopt = "--count"; break;
		case 'd': if (tb_cli_u64_c(optarg, &duration)) badopt = "--duration"; break;
		case 'S': spin = 1; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (badopt)
			return tb_cli_bad_value(prog, NULL, badopt, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "tb-gateway: --bind '%s' is not an IPv4 address\n", bind_addr);
		return 2;
	}
	(void)tb_clock_now_ns(); /* calibrates now, not on the first order */
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		fprintf(stderr, "tb-gateway: listen on %s:%" PRIu64 ": %s\n",
			bind_addr, port, strerror(errno));
		return 1;
	}
	tb_cli_on_stop_signals(&stop);
	printf("gateway: ready port=%u\n", ntohs(sa.sin_port));
	fflush(stdout);

	t0 = tb_clock_mono_ns();
	while (!stop && (!count || orders < count) &&
	       (!duration || tb_clock_mono_ns() - t0 < duration * 1000000000ull)) {
		uint64_t arrival;
		int n;

		for (i = 0; i < BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof(bufs[i]);
			memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_name = &from[i];
			msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
		}
		n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
		arrival = tb_clock_now_ns();
		if (n <= 0) {
			struct pollfd p = { fd, POLLIN, 0 };

			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				fprintf(stderr, "tb-gateway: recvmmsg: %s\n", strerror(errno));
				return 1;
			}
			if (!spin)
				poll(&p, 1, 100);
			continue;
		}
		for (i = 0; i < n; i++) {
			tb_gw_order_t o;
			tb_gw_ack_t a;
			size_t len = msgs[i].msg_len;
			int rc = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ?
				 TB_GW_ESIZE : tb_gw_order_check(bufs[i], len, &o);

			if (rc < 0) {
				bad[-rc]++;
				nbad++;
				continue;
			}
			orders++;
			memset(&a, 0, sizeof(a));
			a.magic = TB_GW_MAGIC;
			a.version = TB_GW_VERSION;
			a.type = TB_GW_ACK;
			a.order_id = o.order_id;
			a.sent_ns = o.sent_ns;
			a.arrival_ns = arrival;
			if (sendto(fd, &a, sizeof(a), 0, (struct sockaddr *)&from[i],
				   msgs[i].msg_hdr.msg_namelen) == (ssize_t)sizeof(a))
				acks++;
		}
	}
	printf("gateway: orders=%" PRIu64 " acks=%" PRIu64 " bad=%" PRIu64
	       " bad_size=%" PRIu64 " bad_magic=%" PRIu64
	       " bad_version=%" PRIu64 " bad_type=%" PRIu64
	       " bad_field=%" PRIu64 "\n", orders, acks, nbad,
	       bad[-TB_GW_ESIZE], bad[-TB_GW_EMAGIC], bad[-TB_GW_EVERSION],
	       bad[-TB_GW_ETYPE], bad[-TB_GW_EFIELD]);
	close(fd);
	return 0;
}

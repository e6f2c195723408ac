/* Late join from a snapshot: a publisher of a book publishes, beside its
 * incremental stream, snapshots of the whole book (a BEGIN naming the last
 * incremental sequence it includes, the book, an END).  A late joiner
 * opens the incremental stream, then the snapshot stream, and
 * tb_sub_start_at_snapshot hands it the first whole snapshot and starts
 * the incremental stream right after it.  The schema is the caller's: here
 * template 1 sets one "price", 10/11/12 are BEGIN, body and END. */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct book {
	uint64_t price;   /* the whole "book" */
	uint64_t updates; /* incremental messages applied */
};

static tb_snapshot_part_t part(void *clientd, const tb_msg_t *m, uint64_t *seq)
{
	(void)clientd;
	if (m->template_id == 10 || m->template_id == 12)
		memcpy(seq, m->data, sizeof(*seq));   /* the sequence it is at */
	return m->template_id == 10 ? TB_SNAPSHOT_BEGIN :
	       m->template_id == 11 ? TB_SNAPSHOT_BODY :
	       m->template_id == 12 ? TB_SNAPSHOT_END : TB_SNAPSHOT_NONE;
}

static void on_snapshot(void *clientd, const tb_msg_t *m)
{
	struct book *b = clientd;

	if (m->template_id == 11)
		memcpy(&b->price, m->data, sizeof(b->price));
}

static void on_update(void *clientd, const tb_msg_t *m)
{
	struct book *b = clientd;

	memcpy(&b->price, m->data, sizeof(b->price));
	b->updates++;
}

static void cfg_for(tb_stream_cfg_t *c, const char *name, uint32_t id)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->id = id;
	c->transport = TB_TRANSPORT_SHM;
	snprintf(c->shm_path, sizeof(c->shm_path), "/dev/shm/tb-example-%s.%d",
		 name, (int)getpid());
}

int main(void)
{
	struct book book = {0, 0};
	tb_stream_cfg_t ci, cs;
	tb_publisher_t *inc, *snap;
	tb_subscriber_t *sub, *ssub;
	uint64_t price = 100, at = 0, s;
	tb_idle_t idle;
	int n;

	cfg_for(&ci, "book", 1);
	cfg_for(&cs, "book_snap", 2);
	if (tb_publisher_open(&inc, &ci) < 0 ||       /* one epoch for both */
	    tb_publisher_open_epoch(&snap, &cs, tb_pub_epoch(inc)) < 0) {
		fprintf(stderr, "publisher: %s\n", tb_errmsg());
		return 1;
	}
	for (; price < 600; price++)                 /* before the joiner */
		tb_pub_offer(inc, 1, &price, sizeof(price));
	if (tb_subscriber_open(&sub, &ci) < 0 ||      /* stream first */
	    tb_subscriber_open(&ssub, &cs) < 0) {
		fprintf(stderr, "subscriber: %s\n", tb_errmsg());
		return 1;
	}
	for (; price < 700; price++)
		tb_pub_offer(inc, 1, &price, sizeof(price));
	s = tb_pub_next_seq(inc) - 1;                 /* a snapshot at s */
	tb_pub_offer(snap, 10, &s, sizeof(s));
	s = price - 1;
	tb_pub_offer(snap, 11, &s, sizeof(s));
	s = tb_pub_next_seq(inc) - 1;
	tb_pub_offer(snap, 12, &s, sizeof(s));
	for (; price < 800; price++)
		tb_pub_offer(inc, 1, &price, sizeof(price));

	if (tb_sub_start_at_snapshot(sub, ssub, part, on_snapshot, &book, 5000,
				     &at) < 0) {
		fprintf(stderr, "join: %s\n", tb_errmsg());
		return 1;
	}
	printf("joined at sequence %llu with price %llu\n",
	       (unsigned long long)at, (unsigned long long)book.price);
	tb_idle_init(&idle, TB_IDLE_BACKOFF);
	while (book.updates < 100) {
		n = tb_sub_poll(sub, on_update, &book, 64);
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	printf("then %llu updates, price %llu\n",
	       (unsigned long long)book.updates, (unsigned long long)book.price);
	tb_subscriber_close(ssub);
	tb_subscriber_close(sub);
	tb_publisher_close(snap);
	tb_publisher_close(inc);
	unlink(ci.shm_path);
	unlink(cs.shm_path);
	return at == 600 && book.price == 799 ? 0 : 1;
}

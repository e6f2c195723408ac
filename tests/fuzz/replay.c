/*
 * replay.c - a main() for a libFuzzer target without libFuzzer: feeds it
 * every file of a corpus, each in a buffer of exactly its size (so that
 * ASan, under SAN=1, sees a read past the end), and fails as the target
 * does, by aborting.  Linked by the Makefile to each tests/fuzz/fuzz_*.c
 * as $(BUILD)/tests/fuzz_replay_<name>, a test in `make test`, so the
 * targets build and hold their properties on every run, not only under
 * `make fuzz`.
 *
 *   fuzz_replay_<name>              the corpus FUZZ_CORPUS_ROOT/<name>/
 *   fuzz_replay_<name> PATH...      these files, or every file of these
 *                                   directories
 *
 * An empty corpus is a failure: a replay of nothing proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FUZZ_CORPUS_ROOT
#define FUZZ_CORPUS_ROOT "tests/fuzz/corpus"
#endif
#define REPLAY_PREFIX "fuzz_replay_"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Feeds the file at `path` to the target; 0, or -1 if it cannot be read. */
static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	/* malloc(0) may return NULL; an empty input is still an input. */
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

/* Replays `path`, a file or a directory of files (in name order, so a
 * failure names the same input on every run); returns the inputs fed, or
 * -1. */
static long replay_path(const char *path)
{
	struct dirent *e;
	struct stat st;
	char **names = NULL;
	size_t n = 0, cap = 0;
	long fed = 0;
	DIR *d;

	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path) == 0 ? 1 : -1;
	d = opendir(path);
	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char *full;

		if (e->d_name[0] == '.')
			continue;
		if (asprintf(&full, "%s/%s", path, e->d_name) < 0)
			abort();
		if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
			free(full);
			continue;
		}
		if (n == cap) {
			char **more = realloc(names, (cap = cap ? 2 * cap : 64) *
					      sizeof(*names));

			if (!more)
				abort();
			names = more;
		}
		names[n++] = full;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		if (fed >= 0 && replay_file(names[i]) == 0)
			fed++;
		else
			fed = -1;
		free(names[i]);
	}
	free(names);
	return fed;
}

int main(int argc, char **argv)
{
	const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	char corpus[4096];
	long total = 0;

	if (argc < 2) {
		if (strncmp(self, REPLAY_PREFIX, strlen(REPLAY_PREFIX)) != 0) {
			fprintf(stderr, "usage: %s CORPUS-DIR-OR-FILE...\n", self);
			return 2;
		}
		snprintf(corpus, sizeof(corpus), "%s/%s", FUZZ_CORPUS_ROOT,
			 self + strlen(REPLAY_PREFIX));
	}
	for (int i = 1; i < argc || (argc < 2 && i == 1); i++) {
		const char *path = argc < 2 ? corpus : argv[i];
		long fed = replay_path(path);

		if (fed < 0)
			return 1;
		printf("replayed %ld inputs from %s\n", fed, path);
		total += fed;
	}
	if (total == 0) {
		fprintf(stderr, "replay: no input: an empty corpus proves nothing\n");
		return 1;
	}
	return 0;
}

# tickbus - one Makefile for the library, tools, examples, tests and benchmarks.
#
# Targets
#   make            build everything into $(BUILD)
#   make deps       install missing Debian packages (apt-get as root; else it
#                   prints the command)
#   make test       unit and scenario tests (tests/run-tests.sh)
#   make demo       the main job: a publisher and two subscribers, with a report
#   make bench      benchmarks; the report goes to $(BUILD)/bench/report.md
#   make test-rdma  the rc scenarios on the first real RDMA device (skips,
#                   saying so, where there is none)
#   make fuzz       builds each libFuzzer target tests/fuzz/fuzz_<name>.c
#                   with clang -fsanitize=fuzzer,address,undefined (the
#                   library too, into build/libfuzzer/) and runs it for
#                   FUZZ_SECONDS, or FUZZ_RUNS executions, from its corpus
#                   tests/fuzz/corpus/<name>/ (tests/fuzz/run-fuzz.sh).
#                   What it finds new goes to build/libfuzzer/fuzz/corpus/
#                   <name>/, a crash to build/libfuzzer/fuzz/artifacts/.
#                   `make test` replays each corpus without libFuzzer (see
#                   Conventions).  FUZZ_TARGETS="a b" runs only those.
#   make fuzz-corpus  writes the seed corpora again from the encoders
#                   (tests/fuzz/gen_corpus.c; deterministic)
#   make install    headers, libraries, tools and tickbus.pc under
#                   $(DESTDIR)$(PREFIX); softrdma and its tb-softrdma wrapper,
#                   the man pages, the Wireshark dissector
#
# Tunables
#   SAN=1           build and test under AddressSanitizer and UBSan
#                   (into build-san/, so it never mixes with the plain build)
#   BUILD=dir       build directory (default build, or build-san with SAN=1)
#   PREFIX=/usr/local  DESTDIR=   install locations (SOFTRDMA_LIBDIR,
#                   MANDIR, WIRESHARK_DIR: beneath PREFIX by default)
#   CC=gcc          compiler; OPT=-O2 optimisation flags
#   NODEPS=1        do not run `make deps` before demo, test and fuzz
#   FUZZ_SECONDS=30 how long `make fuzz` runs each target
#   FUZZ_RUNS=N     run each target N executions instead (CI: 1000000)
#   FUZZ_CC=clang   the compiler for `make fuzz` (it needs libFuzzer)
#   V=1             show every compiler command
#
# Conventions (so that adding a file never needs an edit here)
#   bus/*.c bus/*/*.c publisher/*.c subscriber/*.c
#                                          the library, libtickbus
#   bus/include/tickbus/*.h                its public headers, installed as
#                                          <tickbus/*.h>
#   tools/md/*.c (except tb-*.c)           the market-data applications' core,
#                                          $(BUILD)/lib/libtbmd.a
#   tools/tb-*.c tools/md/tb-*.c           a program, $(BUILD)/bin/tb-*
#   tests/unit/test_*.c tests/scenario/test_*.c   $(BUILD)/tests/test_*
#   tests/fuzz/fuzz_<name>.c               a fuzz target for `make fuzz`, with
#                                          its corpus in tests/fuzz/corpus/<name>/;
#                                          `make` also links it, with the normal
#                                          compiler, to tests/fuzz/replay.c as
#                                          the test $(BUILD)/tests/fuzz_replay_<name>,
#                                          which feeds it every file of the corpus
#   tests/bench/bench_*.c                  $(BUILD)/bench/bench_*
#   examples/*.c                           $(BUILD)/examples/*
#   tools/*/*.mk schema/*.mk               fragments that add to ALL_TARGETS
#                                          and TEST_BINS (softrdma)
#
# Test support
#   tests/common/*.h                       header-only fixtures the tests share
#   tests/common/udp_loss.c                the udp loss interposer, as
#                                          $(BUILD)/tests/libtb_udp_loss.so for
#                                          LD_PRELOAD (built without sanitizers
#                                          even with SAN=1: udp_loss.h puts the
#                                          ASan runtime first in LD_PRELOAD)
#                                          and linked into test_transport_udp

SAN ?= 0
FUZZ ?= 0
ifeq ($(FUZZ),1)
# Set by `make fuzz` for its own make of the fuzz targets: the library
# instrumented for coverage (fuzzer-no-link) and for ASan and UBSan.
BUILD ?= build/libfuzzer
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=all
else ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD ?= build
SANFLAGS :=
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

PREFIX ?= /usr/local
DESTDIR ?=
# Where `make install` puts softrdma's libibverbs.so.1 (tb-softrdma finds it
# there), the man pages and the Wireshark dissector.
SOFTRDMA_LIBDIR ?= $(PREFIX)/lib/tickbus/softrdma
MANDIR ?= $(PREFIX)/share/man
WIRESHARK_DIR ?= $(PREFIX)/share/tickbus/wireshark
WIRESHARK_LUA := $(wildcard tools/wireshark/*.lua)
CC ?= gcc
OPT ?= -O2
VERSION := 0.1.0
SOVERSION := 0

PKGS := libibverbs numa cmocka inih zlib nettle
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs libibverbs numa inih zlib nettle 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

# Every include carries its folder from the top of the tree ("bus/frame.h",
# "bus/transport/shm.h"); public headers are <tickbus/...> as installed.
INCLUDES := -I. -Ibus/include -I$(BUILD)/gen
CFLAGS := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -pthread -fPIC \
	-D_GNU_SOURCE $(INCLUDES) $(PKG_CFLAGS) $(SANFLAGS)
ifeq ($(FUZZ),1)
# Warnings are the normal build's to police; clang's own set differs.
CFLAGS += -Wno-error
endif
LDFLAGS := -pthread $(SANFLAGS)
LDLIBS := $(PKG_LIBS) -lm -lrt

LIB_SRCS := $(wildcard bus/*.c bus/*/*.c publisher/*.c subscriber/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
MD_SRCS := $(filter-out tools/md/tb-%.c,$(wildcard tools/md/*.c))
MD_OBJS := $(MD_SRCS:%.c=$(BUILD)/obj/%.o)
PROG_SRCS := $(wildcard tools/tb-*.c tools/md/tb-*.c)
PROGS := $(addprefix $(BUILD)/bin/,$(notdir $(PROG_SRCS:.c=)))
TEST_SRCS := $(wildcard tests/unit/test_*.c tests/scenario/test_*.c)
TESTS := $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SRCS:.c=)))
BENCH_SRCS := $(wildcard tests/bench/bench_*.c)
BENCHES := $(addprefix $(BUILD)/bench/,$(notdir $(BENCH_SRCS:.c=)))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRCS))
FUZZ_REPLAYS := $(addprefix $(BUILD)/tests/fuzz_replay_,$(FUZZ_NAMES))
FUZZ_BINS := $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_NAMES))
FUZZ_SECONDS ?= 30
FUZZ_RUNS ?=
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_CC ?= clang
FUZZ_BUILD ?= build/libfuzzer
UDP_LOSS_LIB := $(BUILD)/tests/libtb_udp_loss.so
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLES := $(addprefix $(BUILD)/examples/,$(notdir $(EXAMPLE_SRCS:.c=)))

STATIC_LIB := $(BUILD)/lib/libtickbus.a
SHARED_LIB := $(BUILD)/lib/libtickbus.so.$(VERSION)
MD_LIB := $(BUILD)/lib/libtbmd.a
PUBLIC_HEADERS := $(wildcard bus/include/tickbus/*.h)

ALL_TARGETS := $(STATIC_LIB) $(SHARED_LIB) $(PROGS) $(TESTS) $(BENCHES) \
	$(EXAMPLES) $(BUILD)/cxx_header_check $(FUZZ_REPLAYS) $(UDP_LOSS_LIB)
TEST_BINS := $(TESTS) $(FUZZ_REPLAYS) $(BUILD)/tests/test_layout

-include $(wildcard tools/*/*.mk schema/*.mk)

.PHONY: all deps test test-rdma demo bench fuzz fuzz-build fuzz-corpus install clean check-deps
.DEFAULT_GOAL := all

all: $(ALL_TARGETS) $(TEST_BINS)

# Object files: one per source, with header dependencies tracked.
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(MD_LIB): $(MD_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED_LIB): $(LIB_OBJS) bus/tickbus.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libtickbus.so.$(SOVERSION) \
		-Wl,--version-script=bus/tickbus.map $(LDFLAGS) -o $@ $(LIB_OBJS) $(LDLIBS)
	ln -sf libtickbus.so.$(VERSION) $(BUILD)/lib/libtickbus.so.$(SOVERSION)
	ln -sf libtickbus.so.$(SOVERSION) $(BUILD)/lib/libtickbus.so

# Programs, tests, benchmarks and examples link the static library, so they
# run from the build tree without LD_LIBRARY_PATH.  The market-data
# applications (and the tests of their core) also link libtbmd.  Objects a
# target is given as extra prerequisites are linked in too.
define link_rule
$(1)/%: $(BUILD)/obj/$(2)/%.o $(3) $(STATIC_LIB)
	@mkdir -p $$(dir $$@)
	@echo "  LINK    $$@"
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(3) $(STATIC_LIB) $$(LDLIBS) $(4)
endef
$(eval $(call link_rule,$(BUILD)/bin,tools,,))
$(eval $(call link_rule,$(BUILD)/bin,tools/md,$(MD_LIB),))
$(eval $(call link_rule,$(BUILD)/tests,tests/unit,$(MD_LIB),$(CMOCKA_LIBS) -ldl))
$(eval $(call link_rule,$(BUILD)/tests,tests/scenario,$(MD_LIB),$(CMOCKA_LIBS)))
$(eval $(call link_rule,$(BUILD)/bench,tests/bench,$(MD_LIB),))
$(eval $(call link_rule,$(BUILD)/examples,examples,,))

# The udp loss interposer (tests/common/udp_loss.h).  The preloadable
# library is built without sanitizers, as softrdma's is, so that it loads
# into any program; test_transport_udp links the ordinary object.
$(BUILD)/obj/%.nosan.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (no sanitizers)"
	$(Q)$(CC) $(filter-out -fsanitize%,$(CFLAGS)) -MMD -MP -c $< -o $@

$(UDP_LOSS_LIB): $(BUILD)/obj/tests/common/udp_loss.nosan.o
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) -shared -pthread -o $@ $< -ldl -lm

$(BUILD)/tests/test_transport_udp: $(BUILD)/obj/tests/common/udp_loss.o

# Each fuzz target, built with the normal compiler and fed its checked-in
# corpus by tests/fuzz/replay.c, is a test like any other: the targets
# cannot rot between runs of `make fuzz`.
$(BUILD)/obj/tests/fuzz/replay.o: CFLAGS += \
	-DFUZZ_CORPUS_ROOT='"$(CURDIR)/tests/fuzz/corpus"'
$(BUILD)/tests/fuzz_replay_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o \
		$(BUILD)/obj/tests/fuzz/replay.o $(MD_LIB) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MD_LIB) $(STATIC_LIB) $(LDLIBS)

# The libFuzzer binaries, made only by `make fuzz` (FUZZ=1, in
# build/libfuzzer/).
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(MD_LIB) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(MD_LIB) $(STATIC_LIB) $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

# fuzz_schema and gen_corpus include the generated schema (schema/schema.mk
# orders the tree's other objects after it).
$(FUZZ_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/fuzz/gen_corpus.o: | \
	$(SCHEMA_HEADERS)

# The seed corpora, written by tests/fuzz/gen_corpus.c from the encoders.
$(BUILD)/tests/fuzz_gen_corpus: $(BUILD)/obj/tests/fuzz/gen_corpus.o \
		$(MD_LIB) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(MD_LIB) $(STATIC_LIB) $(LDLIBS)

fuzz-corpus: $(BUILD)/tests/fuzz_gen_corpus
	$(BUILD)/tests/fuzz_gen_corpus tests/fuzz/corpus

# Built by `make` too, so that it cannot rot between corpus updates.
all: $(BUILD)/tests/fuzz_gen_corpus

# Objects that only a pattern rule names are intermediate to make, which
# would delete them after each link; keep them.
.SECONDARY: $(FUZZ_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/fuzz/replay.o \
	$(BUILD)/obj/tests/fuzz/gen_corpus.o \
	$(BUILD)/obj/tests/common/udp_loss.nosan.o

# No include runs upward or sideways (tests/layout.sh says the rules).
$(BUILD)/tests/test_layout: tests/layout.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

# The public headers must compile as C++ too.
$(BUILD)/cxx_header_check: tests/cxx_header_check.cpp $(PUBLIC_HEADERS)
	@mkdir -p $(dir $@)
	g++ -std=c++11 -Wall -Wextra -Werror -Ibus/include -c $< -o $@.o && touch $@

deps:
	@tests/deps.sh

check-deps:
	@tests/deps.sh --check

ifeq ($(NODEPS),)
TEST_PREREQ := deps
endif

test: $(TEST_PREREQ)
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) SAN=$(SAN) tests/run-tests.sh $(TEST_BINS)

test-rdma: $(TEST_PREREQ)
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/test-rdma.sh

demo: $(TEST_PREREQ)
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tools/demo.sh

fuzz: $(TEST_PREREQ)
	@$(MAKE) --no-print-directory FUZZ=1 SAN=0 CC=$(FUZZ_CC) OPT=-O1 \
		BUILD=$(FUZZ_BUILD) fuzz-build
	@BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) \
		tests/fuzz/run-fuzz.sh $(FUZZ_TARGETS)

bench: $(TEST_PREREQ)
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/bench/run-bench.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/include/tickbus $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/bin
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(PREFIX)/include/tickbus/
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libtickbus.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libtickbus.so.$(SOVERSION)
	ln -sf libtickbus.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libtickbus.so
	$(if $(PROGS),install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
		bus/tickbus.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tickbus.pc
	install -d $(DESTDIR)$(SOFTRDMA_LIBDIR) $(DESTDIR)$(WIRESHARK_DIR) \
		$(addprefix $(DESTDIR)$(MANDIR)/man,1 3 5 7)
	install -m 755 $(SOFTRDMA_LIB) $(DESTDIR)$(SOFTRDMA_LIBDIR)/
	sed -e 's|@SOFTRDMA_LIBDIR@|$(SOFTRDMA_LIBDIR)|' tools/tb-softrdma.sh \
		> $(DESTDIR)$(PREFIX)/bin/tb-softrdma
	chmod 755 $(DESTDIR)$(PREFIX)/bin/tb-softrdma
	$(foreach s,1 3 5 7,$(if $(filter %.$(s),$(MAN_PAGES)),install -m 644 \
		$(filter %.$(s),$(MAN_PAGES)) $(DESTDIR)$(MANDIR)/man$(s)/;))
	$(if $(WIRESHARK_LUA),install -m 644 $(WIRESHARK_LUA) $(DESTDIR)$(WIRESHARK_DIR)/)

clean:
	rm -rf build build-san

-include $(LIB_OBJS:.o=.d)
-include $(MD_OBJS:.o=.d)
-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/obj/*/*/*.d $(BUILD)/obj/*/*/*/*.d)

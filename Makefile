# kvloom — one non-recursive Makefile. Objects go under build/ (or
# build-$(SANITIZER)/ for sanitizer builds: make SANITIZER=address).
#
#   make            build build/kvloom
#   make install    PREFIX=/usr/local (DESTDIR too): the binary, the shipped model, ../shared's
#                   tokenizers; kvloom finds them from its own path
#   make run        install missing Debian packages, build, serve the default model
#                   (chat page at http://127.0.0.1:8080/, Ctrl-C stops;
#                   make run SERVE_ARGS="--port 8081 -m other.gguf")
#   make test       install missing packages, build, run every test (unit, reference,
#                   fuzz-corpus replay, ASan+UBSan build of the unit tests, a
#                   short ThreadSanitizer phase: the concurrent client load, and
#                   a few seconds of libFuzzer per fuzz target)
#   make tsan       ThreadSanitizer build (build-thread/) of kvloom and the server
#                   tests; runs them all and the concurrent client load
#   make ci         the same with -Werror
#   make fuzz       libFuzzer targets (clang), FUZZ_SECONDS each (60); new coverage is
#                   merged into fuzz/corpus/ (tools/fuzz.sh, docs/reliability.md)
#   make schema-corpus  the JSON Schema corpus (tests/schemas/) with 1000 random walks
#                   a schema (make test runs 2; SCHEMA_CORPUS_WALKS to change)

CC ?= cc
UNAME_M := $(shell uname -m)
OPT ?= -O2
WERROR ?=
CFLAGS_BASE = -std=c11 -g $(OPT) -Isrc -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -pthread -MMD -MP $(WERROR)
LDLIBS = -lmicrohttpd -ljansson -lm -pthread

ifeq ($(SANITIZER),)
  B ?= build
  SANFLAGS =
else
  B ?= build-$(SANITIZER)
  ifeq ($(SANITIZER),address)
    # KVLOOM_KV_CHECK: src/kv/radix.c runs radix_check and kvpool_check after
    # every public mutator of the tree (docs/kv-cache.md) in this build.
    SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DKVLOOM_KV_CHECK
  else
    SANFLAGS = -fsanitize=$(SANITIZER) -fno-omit-frame-pointer
  endif
endif
CFLAGS = $(CFLAGS_BASE) $(SANFLAGS)

# SIMD kernels live in their own files, each built with its own flags and
# chosen at run time; files for another architecture are left out. KERN_DEFS
# tells src/kern/kern.c which tables are compiled in (KVLOOM_KERN_<NAME>), so
# it registers exactly the tables built here. Only x86-64 has SIMD tables so
# far; another architecture gets the scalar table.
ifeq ($(UNAME_M),x86_64)
  SIMD_SKIP =
  KERN_DEFS = -DKVLOOM_KERN_AVX2 -DKVLOOM_KERN_AVX512
else
  SIMD_SKIP = src/kern/avx2.c src/kern/avx512.c
  KERN_DEFS =
endif
FLAGS_avx2 = -mavx2 -mfma -mf16c
FLAGS_avx512 = -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
FLAGS_kern = $(KERN_DEFS)
# In the sanitizer builds the AVX-512 table is compiled without the
# sanitizer (as in the fuzz build): instrumenting it took gcc minutes of the
# phase's build on 2 cores (the longest object by far), and on a machine
# without AVX-512 (this project's test machines) it never runs. The AVX2
# table, which runs here, stays instrumented. test_kernels checks every
# table against the scalar references in every build.
ifneq ($(SANITIZER),)
$(B)/src/kern/avx512.o: SANFLAGS =
endif

LIB_SRC := $(filter-out src/cli/main.c $(SIMD_SKIP),$(wildcard src/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/webui_assets.o
# The web chat page (src/server/webui/*) is compiled into the binary:
# tools/embed.c, built with the host compiler, writes it out as C arrays.
WEBUI_FILES := $(sort $(wildcard src/server/webui/*))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)
FUZZ_REPLAY := $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz/%_replay)
FUZZ_OBJ := $(FUZZ_SRC:%.c=$(B)/%.o) $(B)/fuzz/replay.o

.PHONY: all run test ci deps clean fuzz fuzz-build test-unit test-asan test-fuzz test-build fmt fixtures install uninstall schema-corpus
all: $(B)/kvloom

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FLAGS_$(basename $(notdir $<))) -c $< -o $@

$(B)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -Wall -Wextra -o $@ $<

$(B)/gen/webui_assets.c: $(WEBUI_FILES) $(B)/tools/embed
	@mkdir -p $(dir $@)
	$(B)/tools/embed $@ $(WEBUI_FILES)

$(B)/gen/webui_assets.o: $(B)/gen/webui_assets.c
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libkvloom.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/kvloom: $(B)/src/cli/main.o $(B)/libkvloom.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/%: tests/%.c $(B)/libkvloom.a tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(B)/libkvloom.a $(LDLIBS)

# test_fault_alloc fails the Nth allocation of the server it forks: only that
# binary is linked with the allocation functions wrapped (see its header).
FAULT_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=xmalloc,--wrap=xcalloc,--wrap=xrealloc \
	-Wl,--wrap=xstrdup,--wrap=xstrndup,--wrap=xaligned_alloc
$(B)/tests/test_fault_alloc: LDLIBS += $(FAULT_WRAP)

# Fuzz targets are replayed over their committed corpora by a plain driver
# (no libFuzzer needed); `make fuzz` builds real libFuzzer binaries with clang.
# The target and the driver are compiled to objects of their own (the rule
# above), each with its .d file: gcc compiling two sources into one binary
# writes one .d for both, so the target's headers would not be tracked.
$(B)/fuzz/%_replay: $(B)/fuzz/%.o $(B)/fuzz/replay.o $(B)/libkvloom.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
.SECONDARY: $(FUZZ_OBJ)

# `make fuzz` builds libFuzzer binaries with clang into build-fuzz/ (the
# library once, with -fsanitize=fuzzer-no-link plus ASan and UBSan, UB fatal;
# each target linked with -fsanitize=fuzzer), then tools/fuzz.sh runs each
# target for FUZZ_SECONDS (default 60) and merges new coverage into
# fuzz/corpus/<target>/ (see its header and docs/reliability.md "Fuzzing"):
#   make fuzz FUZZ_SECONDS=3600 FUZZ_TARGETS="oai jinja"
FUZZ_CC ?= clang
FZ := build-fuzz
FUZZ_CFLAGS = -std=c11 -g -O1 -Isrc -D_GNU_SOURCE -pthread -MMD -MP -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FZ)/obj/%.o) $(FZ)/obj/$(B)/gen/webui_assets.o
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(FZ)/%)
# The SIMD kernel tables are built plain (-O2, no sanitizer or coverage): no
# target computes with them, and clang takes half an hour to instrument the
# AVX-512 file; the scalar kernels stay instrumented.
FUZZ_FLAGS_OBJ = $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link
$(FZ)/obj/src/kern/avx2.o $(FZ)/obj/src/kern/avx512.o: FUZZ_FLAGS_OBJ = -std=c11 -g -O2 -Isrc -D_GNU_SOURCE -pthread -MMD -MP

$(FZ)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS_OBJ) $(FLAGS_$(basename $(notdir $<))) -c $< -o $@

$(FZ)/libkvloom.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FZ)/fuzz_%: fuzz/fuzz_%.c $(FZ)/libkvloom.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FZ)/libkvloom.a $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

fuzz: fuzz-build
	@FUZZ_SECONDS="$(FUZZ_SECONDS)" FUZZ_DIR=$(FZ) sh tools/fuzz.sh $(FUZZ_TARGETS)

deps:
	@sh tools/setup.sh

# The builds use every core (JOBS); tests/run.sh runs two tests at a time
# (TEST_JOBS).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

run: deps
	$(MAKE) -j$(JOBS) --no-print-directory $(B)/kvloom
	./$(B)/kvloom serve $(SERVE_ARGS)

# The three phases (plain, ASan+UBSan, the short TSan one) always run, even
# when one fails (a failed build or test in one phase must not hide the
# others' results); the summary then reads every results file and decides the
# exit status, so `make test` fails when any test failed, a results file is
# missing (a phase that did not build) or a phase exited non-zero. Old
# results files are removed first so that a phase that fails to build is
# never summed from a previous run's file.
#
# The later phases' builds run beside the earlier phases' tests, at nice 19
# (PREBUILD=0 turns this off): the tests leave much of the two cores idle
# (they wait on servers, sockets and children; tests/run.sh prints each one's
# CPU beside its wall time), and nice 19 gives the builds only what they leave.
# Background makes start once the plain build is done (the fuzz build reads
# its generated build/gen/webui_assets.c), beside the plain tests: the ASan
# build, then (when it is done: the ASan phase needs it first, and the ASan
# tests leave less CPU idle than the plain ones) the TSan build and the fuzz
# build, which may go on beside the ASan tests. Their output goes to
# <dir>/prebuild.log; each phase still runs its own make, which finds the
# build done, or builds what is left (and shows a compile error) itself. A
# phase waits for the background make of its directory first, so two makes
# never write one directory at once.
PREBUILD ?= 1
PRE = nice -n 19 $(MAKE) -j$(JOBS) --no-print-directory
test: deps
	@rm -f build/test-results.txt build-address/test-results.txt build-thread/test-results.txt \
	  $(FZ)/test-results.txt; st=0; pre=""; \
	if [ "$(PREBUILD)" = 1 ] && $(MAKE) -j$(JOBS) --no-print-directory test-build; then \
	  mkdir -p build-address build-thread $(FZ); rm -f build-address/prebuild.done; \
	  { $(PRE) SANITIZER=address test-build > build-address/prebuild.log 2>&1; \
	    touch build-address/prebuild.done; } & pre=$$!; \
	  { while [ ! -e build-address/prebuild.done ] && kill -0 $$pre 2>/dev/null; do sleep 1; done; \
	    $(PRE) SANITIZER=thread TSAN_TESTS="$(TSAN_SHORT)" tsan-build > build-thread/prebuild.log 2>&1; \
	    $(PRE) fuzz-build > $(FZ)/prebuild.log 2>&1; } & pre2=$$!; fi; \
	$(MAKE) -j$(JOBS) --no-print-directory test-unit || st=1; \
	[ -z "$$pre" ] || wait $$pre; \
	$(MAKE) -j$(JOBS) --no-print-directory SANITIZER=address test-asan || st=1; \
	[ -z "$$pre" ] || wait $$pre2; \
	$(MAKE) -j$(JOBS) --no-print-directory SANITIZER=thread TSAN_TESTS="$(TSAN_SHORT)" test-tsan || st=1; \
	$(MAKE) -j$(JOBS) --no-print-directory test-fuzz || st=1; \
	sh tests/summary.sh build/test-results.txt build-address/test-results.txt build-thread/test-results.txt \
	  $(FZ)/test-results.txt && exit $$st

SCHEMA_CORPUS_WALKS ?= 1000
schema-corpus: $(B)/tests/test_schema_walk
	@SCHEMA_CORPUS_WALKS=$(SCHEMA_CORPUS_WALKS) KVLOOM_BUILD=$(B) nice -n 10 sh tests/schema_corpus_test.sh

# make test's fourth phase: a few seconds of libFuzzer per target
# (tools/fuzz_smoke.sh; FUZZ_SMOKE_SECONDS, 3), nothing merged.
test-fuzz: fuzz-build
	@sh tools/fuzz_smoke.sh $(FZ) > $(FZ)/test-results.txt 2>&1; st=$$?; cat $(FZ)/test-results.txt; exit $$st

# Fixture models are regenerated deterministically and checked against the
# committed sums (tests/fixtures/README.md); test_model_ref reads them.
fixtures: $(B)/kvloom
	@KVLOOM_BIN=$(B)/kvloom FIXTURE_DIR=$(B)/fixtures/models sh tools/gen_fixtures.sh --check

# Exits with tests/run.sh's status: non-zero when any test failed.
test-unit: $(B)/kvloom $(TEST_BIN) $(FUZZ_REPLAY) fixtures
	@sh tests/run.sh $(B) > $(B)/test-results.txt 2>&1; st=$$?; cat $(B)/test-results.txt; exit $$st

test-asan: test-unit

# What test-unit and test-asan build before they run (make test's background
# builds, above).
test-build: $(B)/kvloom $(TEST_BIN) $(FUZZ_REPLAY)

# ThreadSanitizer (docs/reliability.md "ThreadSanitizer"): kvloom and the
# server tests built with -fsanitize=thread into build-thread/ (gcc's TSan;
# libmicrohttpd, jansson and libc are not instrumented, TSan intercepts their
# pthread calls). The first race report ends the process (halt_on_error), so
# the test whose server or client raced fails. tests/tsan.supp holds
# suppressions for reports inside uninstrumented system libraries only, each
# saying why it is not ours. `make tsan` runs TSAN_ALL; `make test`'s third
# phase runs TSAN_SHORT (the client load, ~2 min on 2 cores with the build;
# the queue counts that made test_server_api's 429 probe flaky under TSan
# are checked in every phase by test_engine_sched, and `make tsan` runs
# test_server_api). Results: build-thread/test-results.txt.
#
# TSAN_ALL is chosen, not globbed: a test belongs here when threads of ours
# share state in it. A new test that runs a server or the engine thread
# should be added, with its reason.
#   test_server_load          many client threads against one server, every API
#                             at once: the race hunt this phase exists for
#   test_server_api           handler threads and the engine thread on every
#                             route, the 429 queue counts, cancellation
#   test_server_engine        concurrent clients, disconnects mid-decode and
#                             mid-prefill (the engine frees from another thread)
#   test_server_anthropic, test_server_ollama, test_server_responses
#                             each API's streaming path (producer vs handler
#                             thread), the Responses store's lock
#   test_server_tools, test_server_schema
#                             the constrainer's shared grammar cache, compiled
#                             on handler threads, used by the engine thread
#   test_server_spec          the draft state beside the engine thread
#   test_server_kvpolicy      pins and the radix tree, released by handlers
#   test_server_hardening, test_server_isolation, test_server_backpressure
#                             connection threads, timeouts, parked streams,
#                             per-client counts read and written across threads
#   test_engine_sched, test_engine_fair
#                             the engine thread against submitters and
#                             cancellers on the test's threads, without HTTP
# Not here: the single-threaded unit tests (test_stop, the grammar, tokenizer,
# kernel and model tests): TSan finds nothing where nothing is shared.
TSAN_ALL := test_server_load test_server_api test_server_engine test_server_anthropic test_server_ollama \
	test_server_responses test_server_tools test_server_schema test_server_spec test_server_kvpolicy \
	test_server_hardening test_server_isolation test_server_backpressure test_engine_sched test_engine_fair
TSAN_SHORT = test_server_load
TSAN_TESTS ?= $(TSAN_ALL)
TSAN_OPTS = halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp
.PHONY: tsan test-tsan tsan-build

tsan:
	@rm -f build-thread/test-results.txt
	$(MAKE) -j$(JOBS) --no-print-directory SANITIZER=thread test-tsan

tsan-build: $(B)/kvloom $(TSAN_TESTS:%=$(B)/tests/%)

test-tsan: tsan-build
	@[ "$(SANITIZER)" = thread ] || { echo "test-tsan needs SANITIZER=thread (make tsan)"; exit 2; }
	@TSAN_OPTIONS="$(TSAN_OPTS)" KVLOOM_TESTS="$(TSAN_TESTS)" sh tests/run.sh $(B) > $(B)/test-results.txt 2>&1; \
	st=$$?; cat $(B)/test-results.txt; exit $$st

ci:
	$(MAKE) WERROR=-Werror test

# clang-format (Debian's, installed by tools/setup.sh) with .clang-format,
# on the files named: make fmt FILES="src/kv/radix.c src/kv/radix.h". The
# tree as a whole is not reformatted (its hand-aligned tables and comment
# columns would churn; see .clang-format).
fmt:
	@[ -n "$(FILES)" ] || { echo 'usage: make fmt FILES="a.c b.h" (the files to reformat in place)'; exit 2; }
	clang-format -i --style=file $(FILES)

# A system install: the binary, the shipped model, and (when ../shared is
# beside the repository) the shared tokenizers and vocabularies that
# `kvloom gen` reads. kvloom finds them from its own path
# (PREFIX/bin/kvloom -> PREFIX/share/kvloom/...), so `kvloom run`, `serve`
# and `gen` work from any directory. DESTDIR is prepended for packaging.
PREFIX ?= /usr/local
SHARED ?= ../shared
install: $(B)/kvloom
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/kvloom/models
	install -m 755 $(B)/kvloom $(DESTDIR)$(PREFIX)/bin/kvloom
	install -m 644 models/stories260K.gguf $(DESTDIR)$(PREFIX)/share/kvloom/models/
	@for d in tokenizers vocab; do \
	  if [ -d "$(SHARED)/$$d" ]; then \
	    install -d $(DESTDIR)$(PREFIX)/share/kvloom/shared && \
	    cp -R "$(SHARED)/$$d" $(DESTDIR)$(PREFIX)/share/kvloom/shared/ && \
	    echo "installed $(SHARED)/$$d -> $(DESTDIR)$(PREFIX)/share/kvloom/shared/$$d"; \
	  fi; \
	done

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/kvloom
	rm -rf $(DESTDIR)$(PREFIX)/share/kvloom

clean:
	rm -rf build build-*

# Header dependencies (-MMD): library objects, main, test binaries (gcc
# names a one-step binary's file $@.d) and fuzz replay objects.
-include $(LIB_OBJ:.o=.d) $(B)/src/cli/main.d $(TEST_BIN:=.d) $(FUZZ_OBJ:.o=.d) $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_BIN:=.d)

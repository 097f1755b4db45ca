#!/usr/bin/env python3
"""make_replay.py — writes the agent-like replay texts of `kvloom bench
--spec-replay` (docs/perf.md, "Speculative decoding"): each file is a prompt,
a line "=====OUTPUT=====", and the output an agent would write. They are
synthetic (built here from kvloom's own source, deterministic), not model
outputs: they measure how much of such output the drafters can predict.

  edit.txt   a file in the prompt, the output is the whole file again with
             a rename and two inserted lines (an agent's file edit);
  quote.txt  a tool result (search hits as JSON) in the prompt, the output
             quotes several of its lines back with prose between;
  json.txt   a short instruction, the output a JSON array of 24 records
             with the same keys (repeated structure, varied values);
  prose.txt  an instruction and a free-text answer that repeats little
             (the control: drafts should mostly be rejected).

Run from the repository root: python3 bench/spec/make_replay.py
"""
import json
import random

SEP = "\n=====OUTPUT=====\n"
r = random.Random(27)

src = open("src/sched/suffix.c").read().split("\n")[:140]
src_text = "\n".join(src)
edited = [l.replace("depth", "max_depth") for l in src]
edited.insert(40, "/* (edited: the trie's depth is now max_depth) */")
edited.insert(90, "    /* keeps the table at most half full */")
open("bench/spec/edit.txt", "w").write(
    "Here is src/sched/suffix.c:\n```c\n" + src_text + "\n```\nRename `depth` to `max_depth` everywhere and "
    "add a comment about it. Reply with the whole file." + SEP + "```c\n" + "\n".join(edited) + "\n```\n")

hits = []
files = ["src/sched/engine.c", "src/kv/radix.c", "src/sched/draft.c", "src/server/oai.c", "src/model/forward.c"]
for f in files:
    lines = open(f).read().split("\n")
    for _ in range(4):
        i = r.randrange(len(lines))
        if lines[i].strip():
            hits.append({"path": f, "line": i + 1, "text": lines[i].strip()})
tool = json.dumps({"tool": "grep", "query": "n_tokens", "hits": hits}, indent=2)
answer = ["The search found these places:"]
for h in hits[::2]:
    answer.append("In %s at line %d: `%s` — this is where it is used." % (h["path"], h["line"], h["text"]))
open("bench/spec/quote.txt", "w").write(
    "Tool result:\n" + tool + "\nSummarize where n_tokens is used, quoting the lines." + SEP + "\n".join(answer) + "\n")

names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
recs = [{"id": i + 1, "name": r.choice(names) + "-" + str(r.randrange(100)), "status": r.choice(["open", "closed", "blocked"]),
         "owner": r.choice(["ana", "bo", "cy", "di"]), "priority": r.randrange(1, 5), "tags": r.sample(["api", "kv", "ui", "perf", "docs"], 2)}
        for i in range(24)]
open("bench/spec/json.txt", "w").write(
    "List the 24 open tickets as a JSON array of objects with keys id, name, status, owner, priority, tags." + SEP +
    json.dumps(recs, indent=2) + "\n")

words = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
         "you were her she there been one all we their has would when what more if no out so said can who up its "
         "about into them than then some could time only new two may first any like now my over such our man me "
         "even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great old year off "
         "come since against go came right used take three").split()
prose = " ".join(r.choice(words) for _ in range(400))
open("bench/spec/prose.txt", "w").write("Write something." + SEP + prose + "\n")

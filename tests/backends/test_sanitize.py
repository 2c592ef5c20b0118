"""backends/sanitize.py, the one place user strings become C: identifiers, string literals and
comments, checked by compiling what they produce (as C11 with trigraphs, and as C++)."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
from looptune.backends.c_codegen import CCodegen
from looptune.backends.sanitize import c_comment, c_identifier, c_string, is_reserved
from test_names import HOSTILE, WORDS, random_name

# every header a generated C function or the OpenCL host code includes
INCLUDES = ["stdint.h", "stdbool.h", "stdlib.h", "stdio.h", "math.h", "dlfcn.h", "pthread.h",
            "stdarg.h", "stddef.h", "string.h", "ctype.h"]


def _texts(seed: int, count: int = 200) -> list[str]:
    rng = np.random.default_rng(seed)
    return HOSTILE + WORDS + [random_name(rng) for _ in range(count)]


def _compile(tmp_path, source: str, *flags: str, lang: str = "c") -> str:
    path = tmp_path / f"t.{lang}"
    path.write_text(source)
    cc = ["gcc", "-std=c11"] if lang == "c" else ["g++", "-std=c++11", "-x", "c++"]
    proc = subprocess.run([*cc, "-trigraphs", "-Wall", "-Werror", *flags, str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_c_string_holds_exactly_the_utf8_bytes(tmp_path):
    texts = _texts(1)
    decls = "".join(f"static const char s{k}[] = {c_string(t)};\n" for k, t in enumerate(texts))
    prints = "".join(f'  dump(s{k}, sizeof s{k} - 1);\n' for k in range(len(texts)))
    src = ("#include <stdio.h>\n" + decls +
           "static void dump(const char *s, size_t n) {\n"
           "  for (size_t i = 0; i < n; ++i) printf(\"%02x\", (unsigned char)s[i]);\n"
           "  printf(\"\\n\");\n}\nint main(void) {\n" + prints + "  return 0;\n}\n")
    for lang in ("c", "cpp"):
        _compile(tmp_path, src, "-o", "prog", lang=lang)
        out = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        assert out[:len(texts)] == [t.encode("utf-8").hex() for t in texts]
    assert all(re.fullmatch(r'"[ -~]*"', c_string(t)) for t in texts)   # printable ASCII


def test_c_comment_never_ends_or_splices_a_comment(tmp_path):
    texts = _texts(2) + ["a\\", "*\\\n/", "*??/\n/", "\u202e}", "x*", "/"]
    src = "".join(f"/* {c_comment(t)} */ int v{k} = {k};\n" for k, t in enumerate(texts))
    for lang in ("c", "cpp"):
        out = _compile(tmp_path, src, "-E", "-P", "-Wcomment", "-Wtrigraphs", lang=lang)
        assert out.split() == " ".join(f"int v{k} = {k};" for k in range(len(texts))).split()
    assert all("\n" not in c_comment(t) and "*/" not in c_comment(t) for t in texts)


def test_c_identifier_is_valid_deterministic_and_unique_in_a_scope(tmp_path):
    texts = _texts(3)
    gen = CCodegen()
    names = [gen._unique(("v", k), t) for k, t in enumerate(texts)]
    assert len(set(names)) == len(names)
    again = CCodegen()
    assert names == [again._unique(("v", k), t) for k, t in enumerate(texts)]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) and not is_reserved(n)
               for n in names)
    assert [c_identifier(t) for t in texts] == [c_identifier(t) for t in texts]
    includes = "".join(f"#include <{h}>\n" for h in INCLUDES)
    body = "".join(f"  int {n} = {k};\n  (void){n};\n" for k, n in enumerate(names))
    params = ", ".join(f"const float *{n}" for n in names[:100])
    src = f"{includes}void use({params});\nint f(void) {{\n{body}  return 0;\n}}\n"
    _compile(tmp_path, src, "-fsyntax-only", "-std=gnu11")
    _compile(tmp_path, src, "-fsyntax-only", lang="cpp")


def test_every_macro_of_the_included_headers_is_reserved(tmp_path):
    src = "".join(f"#include <{h}>\n" for h in INCLUDES)
    path = tmp_path / "inc.c"
    path.write_text(src)
    out = subprocess.run(["gcc", "-std=gnu11", "-march=native", "-fopenmp", "-dM", "-E",
                          str(path)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[1].split("(")[0] for line in out.splitlines()}
    missing = sorted(n for n in names if not is_reserved(n))
    assert not missing, f"macros a user name could hit: {missing}"


@pytest.mark.parametrize("name, want", [
    ("A", "A"), ("i.outer", "i_outer"), ("2x", "v_2x"), ("", "v_"), ("NULL", "v_NULL"),
    ("size_t", "v_size_t"), ("M_PI", "v_M_PI"), ("FLT_MAX", "v_FLT_MAX"), ("__x", "v___x"),
    ("lt_alloc", "v_lt_alloc"), ("float4", "v_float4"), ("new", "v_new"), ("é", "v__"),
    ("cl_khr_fp64", "v_cl_khr_fp64"), ("linux", "v_linux"), ("k */ x", "k____x"),
])
def test_c_identifier_examples(name, want):
    assert c_identifier(name) == want

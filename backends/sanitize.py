"""User strings in generated C and OpenCL C: identifiers, string literals and comments.

Names come from the user (tensors, ``lt.var``, loops, functions, target options, file names)
and may hold anything: quotes, ``*/``, ``%``, newlines, backslashes, ``#``, unicode, C keywords,
macros such as ``NULL`` or ``M_PI``. Every code generator puts a user string into generated code
only through one of these functions:

* :func:`c_identifier` -- a valid C / OpenCL C / C++ identifier that no keyword, type, macro or
  library function of the headers we include can capture (callers make it unique in its scope);
* :func:`c_string` -- a C string literal whose bytes are exactly the string's UTF-8 bytes (never
  use it as a ``printf`` format: pass it as the argument of ``"%s"``);
* :func:`c_comment` -- text that cannot end a ``/* */`` comment, splice lines or hide code.

Exported function names are not mangled (they are the library's API): :func:`check_function_name`
refuses the ones that are not identifiers or that would collide with the C library.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

from ..errors import BuildError

# C11/C23 and C++ keywords (the exported header is included from C++ as well)
_KEYWORDS = set("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while bool true false nullptr alignas alignof static_assert thread_local
constexpr typeof typeof_unqual asm fortran
class new delete this template typename namespace operator private public protected virtual
friend try catch throw explicit mutable using export and or not xor bitand bitor compl and_eq
or_eq xor_eq not_eq wchar_t char8_t char16_t char32_t decltype noexcept consteval constinit
co_await co_return co_yield concept requires static_cast dynamic_cast reinterpret_cast
const_cast typeid final override import module
""".split())

# OpenCL C keywords, address spaces, scalar/vector/opaque types and the builtins kernels call
_VECTOR_BASES = "char uchar short ushort int uint long ulong float double half bool".split()
_OPENCL = set("""
kernel global local constant private read_only write_only read_write uniform pipe generic
half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t event_t sampler_t queue_t
clk_event_t ndrange_t reserve_id_t image1d_t image1d_array_t image1d_buffer_t image2d_t
image2d_array_t image2d_depth_t image2d_array_depth_t image3d_t quad complex imaginary
barrier work_group_barrier mem_fence read_mem_fence write_mem_fence get_group_id get_local_id
get_global_id get_global_size get_local_size get_num_groups get_work_dim get_global_offset
rsqrt MAXFLOAT HUGE_VALF INFINITY NAN vec_step kernel_enqueue_flags_t clk_profiling_info
""".split()) | {f"{b}{n}" for b in _VECTOR_BASES for n in (2, 3, 4, 8, 16)}

# Types and functions of the C library (and the ones the generated code calls)
_LIBC = set("""
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intmax_t uintmax_t
int_least8_t int_least16_t int_least32_t int_least64_t uint_least8_t uint_least16_t
uint_least32_t uint_least64_t int_fast8_t int_fast16_t int_fast32_t int_fast64_t uint_fast8_t
uint_fast16_t uint_fast32_t uint_fast64_t ssize_t off_t max_align_t va_list FILE fpos_t div_t
ldiv_t lldiv_t float_t double_t pthread_t pthread_once_t pthread_mutex_t pthread_attr_t
errno environ
abs labs llabs div ldiv lldiv atoi atol atoll atof strtol strtoll strtoul strtoull strtod
strtof strtold rand srand random srandom malloc calloc realloc free aligned_alloc
posix_memalign memalign valloc abort exit _Exit atexit at_quick_exit quick_exit getenv setenv
unsetenv putenv system bsearch qsort mblen mbtowc wctomb mbstowcs wcstombs
memcpy memmove memset memcmp memchr memrchr memccpy mempcpy strcpy strncpy strcat strncat
strcmp strncmp strcoll strxfrm strchr strrchr strstr strspn strcspn strpbrk strtok strlen
strnlen strdup strndup strerror strsignal stpcpy index rindex bzero bcopy bcmp ffs
printf fprintf sprintf snprintf vprintf vfprintf vsprintf vsnprintf scanf fscanf sscanf
fopen fclose fflush fread fwrite fgetc fgets fputc fputs getc getchar gets putc putchar puts
ungetc fseek ftell rewind fgetpos fsetpos clearerr feof ferror perror remove rename tmpfile
tmpnam setbuf setvbuf dprintf getline getdelim popen pclose fileno
open close read write lseek dup dup2 pipe fork execv execve execvp unlink access sleep usleep
kill signal raise time clock difftime mktime strftime gmtime localtime asctime ctime
setjmp longjmp sigsetjmp siglongjmp select poll socket bind listen accept connect send recv
isalnum isalpha isblank iscntrl isdigit isgraph islower isprint ispunct isspace isupper
isxdigit tolower toupper isascii toascii offsetof alloca assert
dlopen dlsym dlclose dlerror pthread_once pthread_create pthread_join pthread_mutex_lock
pthread_mutex_unlock
isnan isinf isfinite isnormal signbit fpclassify isgreater isgreaterequal isless islessequal
islessgreater isunordered nan nanf nanl
""".split())
_LIBM = """acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2
expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log
log10 log1p log2 logb lrint lround modf nearbyint nextafter nexttoward pow remainder remquo
rint round scalbln scalbn sin sinh sqrt tan tanh tgamma trunc j0 j1 jn y0 y1 yn gamma
exp10 pow10 sincos significand drem finite""".split()
_LIBC |= {f + sfx for f in _LIBM for sfx in ("", "f", "l")}

# Object-like macros of the headers the generated C includes (stdint, stdbool, stdlib, stdio,
# math, dlfcn, pthread, stdarg, stddef, string, ctype) as glibc defines them, of the OpenCL C
# headers, and gcc's predefined ones; families below as patterns
_MACROS = set("""
NULL EOF BUFSIZ FILENAME_MAX FOPEN_MAX L_tmpnam L_ctermid P_tmpdir TMP_MAX SEEK_SET SEEK_CUR
SEEK_END stdin stdout stderr EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX INFINITY NAN
HUGE_VAL HUGE_VALF HUGE_VALL MAXFLOAT math_errhandling MATH_ERRNO MATH_ERREXCEPT FP_NAN
FP_INFINITE FP_ZERO FP_SUBNORMAL FP_NORMAL FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMAL FP_ILOGB0
FP_ILOGBNAN BIG_ENDIAN LITTLE_ENDIAN PDP_ENDIAN BYTE_ORDER NFDBITS CLOCKS_PER_SEC TIME_UTC
TIMER_ABSTIME WNOHANG WUNTRACED WSTOPPED WEXITED WCONTINUED WNOWAIT WEXITSTATUS WTERMSIG
WSTOPSIG WIFEXITED WIFSIGNALED WIFSTOPPED WIFCONTINUED sched_priority linux unix i386
CHAR_BIT CHAR_MAX CHAR_MIN SCHAR_MAX SCHAR_MIN UCHAR_MAX SHRT_MAX SHRT_MIN USHRT_MAX INT_MAX
INT_MIN UINT_MAX LONG_MAX LONG_MIN ULONG_MAX LLONG_MAX LLONG_MIN ULLONG_MAX MB_LEN_MAX
PTHREAD_STACK_MIN be16toh be32toh be64toh htobe16 htobe32 htobe64 htole16 htole32 htole64
le16toh le32toh le64toh va_arg va_copy va_end va_start pthread_cleanup_push
pthread_cleanup_pop ENDIAN_LITTLE
""".split())
_MACRO_FAMILIES = re.compile(
    r"(U?INT(8|16|32|64|MAX|PTR|_FAST\d+|_LEAST\d+)?_(MAX|MIN|C|WIDTH)"
    r"|(SIZE|PTRDIFF|SIG_ATOMIC|WCHAR|WINT)_(MAX|MIN|WIDTH)"
    r"|(FLT|DBL|LDBL|HALF|FP|M|CLOCK|PTHREAD|RTLD|SCHED|FD)_[A-Za-z0-9_]+"
    r"|M_[A-Z0-9_]+_[FH]|is[a-z]+_l|toascii_l|E[A-Z]{3,}[A-Z0-9]*)")
# prefixes: the implementation (_X, __x), ours (lt_, LT_, looptune), OpenCL's (cl_, CL_,
# CLK_: extension macros such as cl_khr_fp64 are defined), OpenMP's runtime
_PREFIXES = re.compile(r"(_|lt_|LT_|looptune|cl_|CL_|CLK_|omp_|GOMP_|kmp_|atomic_|memory_)")

RESERVED = frozenset(_KEYWORDS | _OPENCL | _LIBC | _MACROS | {"main"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_reserved(name: str) -> bool:
    """Could ``name`` be captured by a keyword, type, macro or library function of the code
    around it (C, OpenCL C or C++), or clash with looptune's own helpers?"""
    return (name in RESERVED or _MACRO_FAMILIES.fullmatch(name) is not None
            or _PREFIXES.match(name) is not None)


def c_identifier(name: str) -> str:
    """A C identifier for the user name ``name``: every character outside ``[A-Za-z0-9_]``
    becomes ``_``; a name that would start with a digit or is :func:`is_reserved` gets the
    prefix ``v_``. Deterministic; callers that put several names in one scope make the results
    unique (see ``CCodegen._unique``), suffixing ``_1``, ``_2``..."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", str(name))
    return s if s and not s[0].isdigit() and not is_reserved(s) else "v_" + s


def c_string(text: str) -> str:
    """``text`` as one C string literal (with its quotes) holding exactly its UTF-8 bytes.

    The literal is plain printable ASCII: quotes, backslashes and every byte outside 0x20-0x7e
    are escaped (as 3-digit octal, which cannot swallow a following digit the way ``\\x``
    can) and ``?`` is escaped so that no trigraph forms. ``%`` is left alone: never use the
    result as a format string, pass it to ``"%s"``."""
    out = []
    for byte in str(text).encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append({"\n": "\\n", "\t": "\\t"}.get(ch, f"\\{byte:03o}"))
    return '"' + "".join(out) + '"'


def c_comment(text: str) -> str:
    """``text`` made safe inside a ``/* ... */`` comment on one line (and inside the OpenCL
    program, where it is compiled as well): ``*/`` and ``/*`` are broken up, backslashes are
    doubled and never end the text (no line splice), ``??`` cannot form a trigraph, and
    control or invisible characters (newlines, bidirectional overrides) are written as
    escapes such as ``\\n`` or ``\\u202e``."""
    out = []
    for ch in str(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or
                       (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                        f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"))
    s = "".join(out)
    while "*/" in s or "/*" in s or "??" in s:
        s = s.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return s + " " if s.endswith("\\") else s


def check_function_name(name, where: str = "build", exported: bool = False) -> str:
    """``name`` if it can be the C symbol of a generated function, else BuildError: it must be
    an ASCII identifier, no C/C++/OpenCL keyword, macro or type, and no symbol of the C or
    math library (a ``memcpy`` or ``sin`` in a library would replace libc's in every program
    that links it); an ``exported`` one (a library's API) is not ``main`` either."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise BuildError(f"{where}(name={name!r}): the function name must be a C identifier "
                         "(ASCII letters, digits and _, not starting with a digit); got "
                         f"{name!r}; pass e.g. name='{c_identifier(name)}'")
    clash = "is the program's entry point" if exported and name == "main" else _clash(name)
    if clash:
        raise BuildError(f"{where}(name={name!r}): the function name {clash}; got {name!r}; "
                         f"pick another name, e.g. name='{_suggest(name)}'")
    return name


def _suggest(name: str) -> str:
    return f"{name}_op" if not _PREFIXES.match(name) else "op_" + name.lstrip("_")


def _clash(name: str) -> str | None:
    if name in _KEYWORDS or name in _OPENCL:
        return "is a C, C++ or OpenCL C keyword or type"
    if name in _LIBC or name in _MACROS or _MACRO_FAMILIES.fullmatch(name):
        return "collides with a symbol or macro of the C library"
    if _PREFIXES.match(name):
        return ("starts with a prefix reserved for the C implementation, OpenCL, OpenMP or "
                "looptune's generated helpers (_, lt_, cl_, omp_ ...)")
    if any(_exports(lib, name) for lib in _system_libraries()):
        return "collides with a symbol of the C or math library of this system"
    return None


@functools.lru_cache(maxsize=None)
def _system_libraries() -> tuple:
    libs = []
    for short in ("c", "m"):
        path = ctypes.util.find_library(short)
        try:
            libs.append(ctypes.CDLL(path or f"lib{short}.so.6"))
        except OSError:
            pass
    return tuple(libs)


def _exports(lib, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True

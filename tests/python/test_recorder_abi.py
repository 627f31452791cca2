"""The Python package's ctypes mirror of the recorder's C API (moescope/recorder.h) is the
header's: every struct field at the header's offset and size, every struct of the header's size,
every enum value the header's, and every function pointer type the header's. A header change that
the Python side does not follow would otherwise write garbage into traces without an error.

The check is generated from the Python declarations and compiled as C against the header (no third
list): a name the header lacks fails the compile, naming it."""

import ctypes
import os
import pathlib
import re
import subprocess

import pytest

import moescope
from moescope import _recorder, flight_hooks

C_TYPES = {
    ctypes.c_uint32: "uint32_t", ctypes.c_int32: "int32_t", ctypes.c_uint64: "uint64_t",
    ctypes.c_int64: "int64_t", ctypes.c_double: "double", ctypes.c_char_p: "const char*",
    ctypes.c_int: "int",
}
STRUCTS = {_recorder.CommOpInfo: "moescope_comm_op_info",
           flight_hooks._TriggerInfo: "moescope_trigger_info"}


def c_type(python_type):
    """The C spelling of a ctypes argument type (pointers to const: Python only reads them)."""
    if python_type is None:
        return "void"
    if python_type in C_TYPES:
        return C_TYPES[python_type]
    target = python_type._type_  # a ctypes.POINTER
    return "const " + (STRUCTS.get(target) or C_TYPES[target]) + "*"


def enum_values():
    """C enumerator -> the value the Python side uses."""
    values = {f"MOESCOPE_COMM_{name.upper()}": value
              for name, value in _recorder.COMM_KINDS.items()}
    values.update({f"MOESCOPE_EXPERTS_{name.upper()}": value
                   for name, value in _recorder.SCOPES.items()})
    values["MOESCOPE_TRIGGER_EXCEPTION"] = flight_hooks.TRIGGER_EXCEPTION
    values["MOESCOPE_TRIGGER_COLLECTIVE_TIMEOUT"] = flight_hooks.TRIGGER_COLLECTIVE_TIMEOUT
    return values


def check_program():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "moescope/recorder.h"', ""]
    signatures = {**_recorder.SIGNATURES, **_recorder.OPTIONAL_SIGNATURES}
    for name, (argtypes, restype) in signatures.items():
        arguments = ", ".join(c_type(t) for t in argtypes) or "void"
        # The function's type against the Python-declared one (a GCC/Clang builtin: no link).
        lines.append(f"_Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), "
                     f'{c_type(restype)} (*)({arguments})), "{name}: not the header\'s type");')
    lines += ["", "int main(void) {"]
    for structure, c_name in STRUCTS.items():
        lines.append(f'  printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in structure._fields_:
            lines.append(f'  printf("{c_name}.{field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f"sizeof((({c_name}*)0)->{field}));")
    for enumerator in enum_values():
        lines.append(f'  printf("{enumerator} %d\\n", (int){enumerator});')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def header_layout(tmp_path):
    """What the C compiler says of the header: {"name": [numbers]}."""
    compiler = os.environ.get("MOESCOPE_C_COMPILER", "cc")
    profiler = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiler")
    includes = [os.path.join(profiler, library, "include") for library in ("recorder", "trace")]
    source, program = tmp_path / "recorder_abi_check.c", tmp_path / "recorder_abi_check"
    source.write_text(check_program())
    built = subprocess.run([compiler, "-std=c11", "-Wall", "-Werror",
                            *[f"-I{include}" for include in includes], str(source),
                            "-o", str(program)], capture_output=True, text=True)
    assert built.returncode == 0, f"the Python mirror does not compile against recorder.h:\n" \
                                  f"{built.stderr}"
    output = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: [int(n) for n in line.split()[1:]] for line in output.splitlines()}


def test_structs_enums_and_signatures_are_the_headers(tmp_path):
    layout = header_layout(tmp_path)
    for structure, c_name in STRUCTS.items():
        assert layout[c_name] == [ctypes.sizeof(structure)], c_name
        for field, _ in structure._fields_:
            descriptor = getattr(structure, field)
            assert layout[f"{c_name}.{field}"] == [descriptor.offset, descriptor.size], \
                f"{c_name}.{field}: (offset, size) in C vs Python"
    for enumerator, value in enum_values().items():
        assert layout[enumerator] == [value], enumerator


def test_a_field_the_header_does_not_have_fails_naming_it(tmp_path, monkeypatch):
    class Renamed(ctypes.Structure):
        _fields_ = [("time_ns", ctypes.c_uint64), ("why", ctypes.c_uint32)]
    monkeypatch.setitem(STRUCTS, Renamed, "moescope_trigger_info")
    with pytest.raises(AssertionError, match="why"):
        header_layout(tmp_path)


def test_a_wrong_argument_type_fails_naming_the_function(tmp_path, monkeypatch):
    monkeypatch.setitem(_recorder.SIGNATURES, "moescope_step", ([ctypes.c_uint32], None))
    with pytest.raises(AssertionError, match="moescope_step"):
        header_layout(tmp_path)


def test_the_variables_python_reads_are_the_recordings_environment():
    # recording_environment.h names every variable of a recording and who reads it; those it
    # says Python reads must be the ones the package reads (a rename on either side fails).
    profiler = pathlib.Path(__file__).resolve().parents[2] / "profiler"
    header = (profiler / "trace/include/moescope/trace/recording_environment.h").read_text()
    declared = dict(re.findall(r'X\(k\w+, "(MOESCOPE_\w+)", "([^"]*)"\)', header))
    assert len(declared) > 30
    for_python = {name for name, meaning in declared.items()
                  if "Python" in meaning.split(":")[0]}
    package = pathlib.Path(moescope.__file__).parent
    read = set()
    for source in package.rglob("*.py"):
        read |= set(re.findall(r'"(MOESCOPE_[A-Z0-9_]+)"', source.read_text()))
    assert for_python and for_python <= read, sorted(for_python - read)

"""evictd's CRI subset matches upstream runtime.v1, field by field, through the generated descriptors.

The tables below are transcribed by hand from upstream
``k8s.io/cri-api/pkg/apis/runtime/v1/api.proto`` as of kubernetes/kubernetes commit
f9e5dd84ad4df476b02bd7237b2e2d05d6d79f7b (path staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto).
A wrong number or type would make evictd silently read another field (or nothing) from a real runtime,
so every message, field, enum value and RPC of ``evictd/cri/api.proto`` must appear here with upstream's
number and type, and nothing may be declared that is not transcribed. The generated modules must also
be exactly what ``grpc_tools.protoc`` makes of the .proto today (see src/evictd/cri/README.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from evictd.cri import api_pb2

UPSTREAM = (
    "kubernetes/kubernetes@f9e5dd84ad4df476b02bd7237b2e2d05d6d79f7b:"
    "staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
)
PACKAGE = "runtime.v1"
SRC = Path(__file__).resolve().parents[2] / "src"
PROTO = "evictd/cri/api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")

# (message, field, number, type) with type as upstream writes it: a scalar, a message or enum name,
# "repeated X" or "map<string, string>".
UPSTREAM_FIELDS: list[tuple[str, str, int, str]] = [
    ("VersionRequest", "version", 1, "string"),
    ("VersionResponse", "version", 1, "string"),
    ("VersionResponse", "runtime_name", 2, "string"),
    ("VersionResponse", "runtime_version", 3, "string"),
    ("VersionResponse", "runtime_api_version", 4, "string"),
    ("Int64Value", "value", 1, "int64"),
    ("UInt64Value", "value", 1, "uint64"),
    ("KeyValue", "key", 1, "string"),
    ("KeyValue", "value", 2, "string"),
    ("ImageSpec", "image", 1, "string"),
    ("ImageSpec", "annotations", 2, "map<string, string>"),
    ("NamespaceOption", "network", 1, "NamespaceMode"),
    ("NamespaceOption", "pid", 2, "NamespaceMode"),
    ("NamespaceOption", "ipc", 3, "NamespaceMode"),
    ("NamespaceOption", "target_id", 4, "string"),
    ("Mount", "container_path", 1, "string"),
    ("Mount", "host_path", 2, "string"),
    ("Mount", "readonly", 3, "bool"),
    ("LinuxContainerResources", "cpu_period", 1, "int64"),
    ("LinuxContainerResources", "cpu_quota", 2, "int64"),
    ("LinuxContainerResources", "cpu_shares", 3, "int64"),
    ("LinuxContainerResources", "memory_limit_in_bytes", 4, "int64"),
    ("LinuxContainerResources", "oom_score_adj", 5, "int64"),
    ("PodSandboxMetadata", "name", 1, "string"),
    ("PodSandboxMetadata", "uid", 2, "string"),
    ("PodSandboxMetadata", "namespace", 3, "string"),
    ("PodSandboxMetadata", "attempt", 4, "uint32"),
    ("LinuxSandboxSecurityContext", "namespace_options", 1, "NamespaceOption"),
    ("LinuxPodSandboxConfig", "cgroup_parent", 1, "string"),
    ("LinuxPodSandboxConfig", "security_context", 2, "LinuxSandboxSecurityContext"),
    ("PodSandboxConfig", "metadata", 1, "PodSandboxMetadata"),
    ("PodSandboxConfig", "hostname", 2, "string"),
    ("PodSandboxConfig", "log_directory", 3, "string"),
    ("PodSandboxConfig", "labels", 6, "map<string, string>"),
    ("PodSandboxConfig", "annotations", 7, "map<string, string>"),
    ("PodSandboxConfig", "linux", 8, "LinuxPodSandboxConfig"),
    ("RunPodSandboxRequest", "config", 1, "PodSandboxConfig"),
    ("RunPodSandboxRequest", "runtime_handler", 2, "string"),
    ("RunPodSandboxResponse", "pod_sandbox_id", 1, "string"),
    ("StopPodSandboxRequest", "pod_sandbox_id", 1, "string"),
    ("RemovePodSandboxRequest", "pod_sandbox_id", 1, "string"),
    ("PodSandboxStatusRequest", "pod_sandbox_id", 1, "string"),
    ("PodSandboxStatusRequest", "verbose", 2, "bool"),
    ("PodSandboxStatus", "id", 1, "string"),
    ("PodSandboxStatus", "metadata", 2, "PodSandboxMetadata"),
    ("PodSandboxStatus", "state", 3, "PodSandboxState"),
    ("PodSandboxStatus", "created_at", 4, "int64"),
    ("PodSandboxStatus", "labels", 7, "map<string, string>"),
    ("PodSandboxStatus", "annotations", 8, "map<string, string>"),
    ("PodSandboxStatus", "runtime_handler", 9, "string"),
    ("PodSandboxStatusResponse", "status", 1, "PodSandboxStatus"),
    ("PodSandboxStateValue", "state", 1, "PodSandboxState"),
    ("PodSandboxFilter", "id", 1, "string"),
    ("PodSandboxFilter", "state", 2, "PodSandboxStateValue"),
    ("PodSandboxFilter", "label_selector", 3, "map<string, string>"),
    ("ListPodSandboxRequest", "filter", 1, "PodSandboxFilter"),
    ("PodSandbox", "id", 1, "string"),
    ("PodSandbox", "metadata", 2, "PodSandboxMetadata"),
    ("PodSandbox", "state", 3, "PodSandboxState"),
    ("PodSandbox", "created_at", 4, "int64"),
    ("PodSandbox", "labels", 5, "map<string, string>"),
    ("PodSandbox", "annotations", 6, "map<string, string>"),
    ("PodSandbox", "runtime_handler", 7, "string"),
    ("ListPodSandboxResponse", "items", 1, "repeated PodSandbox"),
    ("ContainerMetadata", "name", 1, "string"),
    ("ContainerMetadata", "attempt", 2, "uint32"),
    ("LinuxContainerSecurityContext", "namespace_options", 3, "NamespaceOption"),
    ("LinuxContainerConfig", "resources", 1, "LinuxContainerResources"),
    ("LinuxContainerConfig", "security_context", 2, "LinuxContainerSecurityContext"),
    ("ContainerConfig", "metadata", 1, "ContainerMetadata"),
    ("ContainerConfig", "image", 2, "ImageSpec"),
    ("ContainerConfig", "command", 3, "repeated string"),
    ("ContainerConfig", "args", 4, "repeated string"),
    ("ContainerConfig", "working_dir", 5, "string"),
    ("ContainerConfig", "envs", 6, "repeated KeyValue"),
    ("ContainerConfig", "mounts", 7, "repeated Mount"),
    ("ContainerConfig", "labels", 9, "map<string, string>"),
    ("ContainerConfig", "annotations", 10, "map<string, string>"),
    ("ContainerConfig", "log_path", 11, "string"),
    ("ContainerConfig", "linux", 15, "LinuxContainerConfig"),
    ("CreateContainerRequest", "pod_sandbox_id", 1, "string"),
    ("CreateContainerRequest", "config", 2, "ContainerConfig"),
    ("CreateContainerRequest", "sandbox_config", 3, "PodSandboxConfig"),
    ("CreateContainerResponse", "container_id", 1, "string"),
    ("StartContainerRequest", "container_id", 1, "string"),
    ("StopContainerRequest", "container_id", 1, "string"),
    ("StopContainerRequest", "timeout", 2, "int64"),
    ("RemoveContainerRequest", "container_id", 1, "string"),
    ("ContainerStateValue", "state", 1, "ContainerState"),
    ("ContainerFilter", "id", 1, "string"),
    ("ContainerFilter", "state", 2, "ContainerStateValue"),
    ("ContainerFilter", "pod_sandbox_id", 3, "string"),
    ("ContainerFilter", "label_selector", 4, "map<string, string>"),
    ("ListContainersRequest", "filter", 1, "ContainerFilter"),
    ("Container", "id", 1, "string"),
    ("Container", "pod_sandbox_id", 2, "string"),
    ("Container", "metadata", 3, "ContainerMetadata"),
    ("Container", "image", 4, "ImageSpec"),
    ("Container", "image_ref", 5, "string"),
    ("Container", "state", 6, "ContainerState"),
    ("Container", "created_at", 7, "int64"),
    ("Container", "labels", 8, "map<string, string>"),
    ("Container", "annotations", 9, "map<string, string>"),
    ("Container", "image_id", 10, "string"),
    ("ListContainersResponse", "containers", 1, "repeated Container"),
    ("ContainerStatusRequest", "container_id", 1, "string"),
    ("ContainerStatusRequest", "verbose", 2, "bool"),
    ("ContainerStatus", "id", 1, "string"),
    ("ContainerStatus", "metadata", 2, "ContainerMetadata"),
    ("ContainerStatus", "state", 3, "ContainerState"),
    ("ContainerStatus", "created_at", 4, "int64"),
    ("ContainerStatus", "started_at", 5, "int64"),
    ("ContainerStatus", "finished_at", 6, "int64"),
    ("ContainerStatus", "exit_code", 7, "int32"),
    ("ContainerStatus", "image", 8, "ImageSpec"),
    ("ContainerStatus", "image_ref", 9, "string"),
    ("ContainerStatus", "reason", 10, "string"),
    ("ContainerStatus", "message", 11, "string"),
    ("ContainerStatus", "labels", 12, "map<string, string>"),
    ("ContainerStatus", "annotations", 13, "map<string, string>"),
    ("ContainerStatus", "log_path", 15, "string"),
    ("ContainerStatus", "image_id", 17, "string"),
    ("ContainerStatusResponse", "status", 1, "ContainerStatus"),
    ("FilesystemIdentifier", "mountpoint", 1, "string"),
    ("FilesystemUsage", "timestamp", 1, "int64"),
    ("FilesystemUsage", "fs_id", 2, "FilesystemIdentifier"),
    ("FilesystemUsage", "used_bytes", 3, "UInt64Value"),
    ("FilesystemUsage", "inodes_used", 4, "UInt64Value"),
    ("CpuUsage", "timestamp", 1, "int64"),
    ("CpuUsage", "usage_core_nano_seconds", 2, "UInt64Value"),
    ("CpuUsage", "usage_nano_cores", 3, "UInt64Value"),
    ("MemoryUsage", "timestamp", 1, "int64"),
    ("MemoryUsage", "working_set_bytes", 2, "UInt64Value"),
    ("MemoryUsage", "available_bytes", 3, "UInt64Value"),
    ("MemoryUsage", "usage_bytes", 4, "UInt64Value"),
    ("MemoryUsage", "rss_bytes", 5, "UInt64Value"),
    ("MemoryUsage", "page_faults", 6, "UInt64Value"),
    ("MemoryUsage", "major_page_faults", 7, "UInt64Value"),
    ("ProcessUsage", "timestamp", 1, "int64"),
    ("ProcessUsage", "process_count", 2, "UInt64Value"),
    ("ContainerAttributes", "id", 1, "string"),
    ("ContainerAttributes", "metadata", 2, "ContainerMetadata"),
    ("ContainerAttributes", "labels", 3, "map<string, string>"),
    ("ContainerAttributes", "annotations", 4, "map<string, string>"),
    ("ContainerStats", "attributes", 1, "ContainerAttributes"),
    ("ContainerStats", "cpu", 2, "CpuUsage"),
    ("ContainerStats", "memory", 3, "MemoryUsage"),
    ("ContainerStats", "writable_layer", 4, "FilesystemUsage"),
    ("ContainerStatsFilter", "id", 1, "string"),
    ("ContainerStatsFilter", "pod_sandbox_id", 2, "string"),
    ("ContainerStatsFilter", "label_selector", 3, "map<string, string>"),
    ("ListContainerStatsRequest", "filter", 1, "ContainerStatsFilter"),
    ("ListContainerStatsResponse", "stats", 1, "repeated ContainerStats"),
    ("PodSandboxAttributes", "id", 1, "string"),
    ("PodSandboxAttributes", "metadata", 2, "PodSandboxMetadata"),
    ("PodSandboxAttributes", "labels", 3, "map<string, string>"),
    ("PodSandboxAttributes", "annotations", 4, "map<string, string>"),
    ("LinuxPodSandboxStats", "cpu", 1, "CpuUsage"),
    ("LinuxPodSandboxStats", "memory", 2, "MemoryUsage"),
    ("LinuxPodSandboxStats", "process", 4, "ProcessUsage"),
    ("LinuxPodSandboxStats", "containers", 5, "repeated ContainerStats"),
    ("PodSandboxStats", "attributes", 1, "PodSandboxAttributes"),
    ("PodSandboxStats", "linux", 2, "LinuxPodSandboxStats"),
    ("PodSandboxStatsFilter", "id", 1, "string"),
    ("PodSandboxStatsFilter", "label_selector", 2, "map<string, string>"),
    ("ListPodSandboxStatsRequest", "filter", 1, "PodSandboxStatsFilter"),
    ("ListPodSandboxStatsResponse", "stats", 1, "repeated PodSandboxStats"),
    ("ImageFilter", "image", 1, "ImageSpec"),
    ("ListImagesRequest", "filter", 1, "ImageFilter"),
    ("Image", "id", 1, "string"),
    ("Image", "repo_tags", 2, "repeated string"),
    ("Image", "repo_digests", 3, "repeated string"),
    ("Image", "size", 4, "uint64"),
    ("Image", "uid", 5, "Int64Value"),
    ("Image", "username", 6, "string"),
    ("Image", "spec", 7, "ImageSpec"),
    ("Image", "pinned", 8, "bool"),
    ("ListImagesResponse", "images", 1, "repeated Image"),
    ("RemoveImageRequest", "image", 1, "ImageSpec"),
    ("ImageFsInfoResponse", "image_filesystems", 1, "repeated FilesystemUsage"),
    ("ImageFsInfoResponse", "container_filesystems", 2, "repeated FilesystemUsage"),
]

# Messages kept without any field (upstream declares them empty too).
UPSTREAM_EMPTY_MESSAGES = {
    "StopPodSandboxResponse", "RemovePodSandboxResponse", "StartContainerResponse", "StopContainerResponse",
    "RemoveContainerResponse", "RemoveImageResponse", "ImageFsInfoRequest",
}

UPSTREAM_ENUMS: dict[str, dict[str, int]] = {
    "NamespaceMode": {"POD": 0, "CONTAINER": 1, "NODE": 2, "TARGET": 3},
    "PodSandboxState": {"SANDBOX_READY": 0, "SANDBOX_NOTREADY": 1},
    "ContainerState": {"CONTAINER_CREATED": 0, "CONTAINER_RUNNING": 1, "CONTAINER_EXITED": 2, "CONTAINER_UNKNOWN": 3},
}

# (service, rpc, request, response); all unary.
UPSTREAM_RPCS: list[tuple[str, str, str, str]] = [
    ("RuntimeService", "Version", "VersionRequest", "VersionResponse"),
    ("RuntimeService", "RunPodSandbox", "RunPodSandboxRequest", "RunPodSandboxResponse"),
    ("RuntimeService", "StopPodSandbox", "StopPodSandboxRequest", "StopPodSandboxResponse"),
    ("RuntimeService", "RemovePodSandbox", "RemovePodSandboxRequest", "RemovePodSandboxResponse"),
    ("RuntimeService", "PodSandboxStatus", "PodSandboxStatusRequest", "PodSandboxStatusResponse"),
    ("RuntimeService", "ListPodSandbox", "ListPodSandboxRequest", "ListPodSandboxResponse"),
    ("RuntimeService", "CreateContainer", "CreateContainerRequest", "CreateContainerResponse"),
    ("RuntimeService", "StartContainer", "StartContainerRequest", "StartContainerResponse"),
    ("RuntimeService", "StopContainer", "StopContainerRequest", "StopContainerResponse"),
    ("RuntimeService", "RemoveContainer", "RemoveContainerRequest", "RemoveContainerResponse"),
    ("RuntimeService", "ListContainers", "ListContainersRequest", "ListContainersResponse"),
    ("RuntimeService", "ContainerStatus", "ContainerStatusRequest", "ContainerStatusResponse"),
    ("RuntimeService", "ListContainerStats", "ListContainerStatsRequest", "ListContainerStatsResponse"),
    ("RuntimeService", "ListPodSandboxStats", "ListPodSandboxStatsRequest", "ListPodSandboxStatsResponse"),
    ("ImageService", "ListImages", "ListImagesRequest", "ListImagesResponse"),
    ("ImageService", "RemoveImage", "RemoveImageRequest", "RemoveImageResponse"),
    ("ImageService", "ImageFsInfo", "ImageFsInfoRequest", "ImageFsInfoResponse"),
]

SCALAR_TYPE_NAMES = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_BYTES: "bytes",
}


def type_of(field: FieldDescriptor) -> str:
    """Return a field's type as the .proto spells it (within package runtime.v1)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        key, value = (type_of(f) for f in field.message_type.fields)
        return f"map<{key}, {value}>"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        base = field.message_type.full_name.removeprefix(PACKAGE + ".")
    elif field.type == FieldDescriptor.TYPE_ENUM:
        base = field.enum_type.full_name.removeprefix(PACKAGE + ".")
    else:
        base = SCALAR_TYPE_NAMES[field.type]
    return f"repeated {base}" if field.is_repeated else base


def declared_messages() -> dict[str, Descriptor]:
    """Return the messages the generated module declares (map entry helpers excluded)."""
    return {name: message for name, message in api_pb2.DESCRIPTOR.message_types_by_name.items()
            if not message.GetOptions().map_entry}


def declared_fields() -> dict[tuple[str, str], FieldDescriptor]:
    return {(name, field.name): field for name, message in declared_messages().items() for field in message.fields}


def field_mismatches(table: list[tuple[str, str, int, str]]) -> list[str]:
    """Return every disagreement between a field table and the generated descriptors (empty: they agree)."""
    problems: list[str] = []
    fields = declared_fields()
    for message, name, number, kind in table:
        field = fields.get((message, name))
        if field is None:
            problems.append(f"{message}.{name} is missing")
            continue
        if field.number != number:
            problems.append(f"{message}.{name} has number {field.number}, upstream {number}")
        if type_of(field) != kind:
            problems.append(f"{message}.{name} has type {type_of(field)}, upstream {kind}")
    transcribed = {(message, name) for message, name, _, _ in table}
    problems += [f"{message}.{name} is declared but not transcribed from upstream"
                 for message, name in sorted(set(fields) - transcribed)]
    return problems


def test_package_is_runtime_v1() -> None:
    assert api_pb2.DESCRIPTOR.package == PACKAGE


def test_every_field_has_upstream_number_and_type() -> None:
    assert field_mismatches(UPSTREAM_FIELDS) == [], f"compare with {UPSTREAM}"


def test_every_message_is_transcribed() -> None:
    with_fields = {message for message, _, _, _ in UPSTREAM_FIELDS}
    assert set(declared_messages()) == with_fields | UPSTREAM_EMPTY_MESSAGES
    for name in UPSTREAM_EMPTY_MESSAGES:
        assert not declared_messages()[name].fields, name


@pytest.mark.parametrize("row", [
    ("StopContainerRequest", "timeout", 3, "int64"),  # a wrong number
    ("Container", "created_at", 7, "uint64"),  # a wrong type
    ("Container", "creation_time", 7, "int64"),  # a wrong name
], ids=["wrong-number", "wrong-type", "wrong-name"])
def test_the_field_check_can_fail(row: tuple[str, str, int, str]) -> None:
    table = [entry for entry in UPSTREAM_FIELDS if entry[:2] != row[:2]] + [row]
    assert field_mismatches(table) != []


def test_missing_transcription_is_reported() -> None:
    assert field_mismatches(UPSTREAM_FIELDS[1:]) == [
        "VersionRequest.version is declared but not transcribed from upstream"
    ]


@pytest.mark.parametrize("enum_name", sorted(UPSTREAM_ENUMS))
def test_enum_values_match_upstream(enum_name: str) -> None:
    enum: EnumDescriptor = api_pb2.DESCRIPTOR.enum_types_by_name[enum_name]
    assert {value.name: value.number for value in enum.values} == UPSTREAM_ENUMS[enum_name]


def test_only_transcribed_enums_are_declared() -> None:
    assert set(api_pb2.DESCRIPTOR.enum_types_by_name) == set(UPSTREAM_ENUMS)


def test_services_declare_exactly_the_rpcs_evictd_uses() -> None:
    declared = []
    for service_name, service in api_pb2.DESCRIPTOR.services_by_name.items():
        assert service.full_name == f"{PACKAGE}.{service_name}"  # what containerd and CRI-O serve
        for method in service.methods:
            assert not method.client_streaming and not method.server_streaming, method.full_name
            declared.append((service_name, method.name, method.input_type.full_name.removeprefix(PACKAGE + "."),
                             method.output_type.full_name.removeprefix(PACKAGE + ".")))
    assert sorted(declared) == sorted(UPSTREAM_RPCS)


def test_generated_modules_match_the_proto(tmp_path: Path) -> None:
    """The committed api_pb2*.py files are what protoc makes of api.proto (the README's command)."""
    command = [sys.executable, "-m", "grpc_tools.protoc", "-I", str(SRC), f"--python_out={tmp_path}",
               f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str(SRC / PROTO)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for name in GENERATED:
        fresh = (tmp_path / "evictd" / "cri" / name).read_text()
        committed = (SRC / "evictd" / "cri" / name).read_text()
        assert fresh == committed, f"{name} is stale: regenerate it (src/evictd/cri/README.md)"


def test_generated_grpc_module_imports_the_messages_from_the_package() -> None:
    text = (SRC / "evictd" / "cri" / "api_pb2_grpc.py").read_text()
    assert "from evictd.cri import api_pb2" in text

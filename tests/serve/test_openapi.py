# tests/serve/test_openapi.py: docs/openapi.json is OpenAPI 3, complete against docs/api.md, every $ref resolving.
import json
import os
import re
import unittest

from harness import REPO

API_MD = os.path.join(REPO, "docs", "api.md")
OPENAPI = os.path.join(REPO, "docs", "openapi.json")
# "GET /v1/sandboxes/{id}/files?path=P": a method, a /v1 path, the query left off.
ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH)\s+(/v1/[^\s`?]*)")


def documented_routes():
    text = open(API_MD, encoding="utf-8").read()
    routes = set()
    for method, path in ROUTE.findall(re.sub(r"\s+", " ", text)):
        routes.add((method.lower(), path))
    return routes


def resolve(doc, ref):
    if not ref.startswith("#/"):
        raise KeyError(ref)
    node = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node, where="#"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield where, v
            else:
                yield from refs(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from refs(v, f"{where}/{i}")


class OpenApiDocument(unittest.TestCase):
    def setUp(self):
        with open(OPENAPI, encoding="utf-8") as f:
            self.doc = json.load(f)  # not JSON: the test errors here with the parser's position

    def test_is_openapi_3(self):
        self.assertRegex(str(self.doc.get("openapi")), r"^3\.\d+\.\d+$")
        self.assertIn("title", self.doc.get("info", {}))
        self.assertIn("version", self.doc.get("info", {}))
        self.assertIsInstance(self.doc.get("paths"), dict)

    def test_every_route_of_api_md_is_in_it_and_no_other(self):
        documented = documented_routes()
        self.assertGreaterEqual(len(documented), 12, f"docs/api.md's routes were not found: {documented}")
        in_doc = {(m, p) for p, item in self.doc["paths"].items() for m in item
                  if m in ("get", "put", "post", "delete", "patch")}
        self.assertEqual(sorted(documented - in_doc), [], "routes of docs/api.md missing from docs/openapi.json")
        self.assertEqual(sorted(in_doc - documented), [], "routes of docs/openapi.json that docs/api.md lacks")

    def test_result_statuses_are_those_of_result_md(self):
        # The `status` row of docs/result.md's table names every status a result can carry; a validating client
        # generated from the document must accept each of them.
        row = next(line for line in open(os.path.join(REPO, "docs", "result.md"), encoding="utf-8")
                   if line.startswith("| `status` |"))
        documented = set(re.findall(r"`([a-z_]+)`", row.split("|")[2]))
        result = self.doc["components"]["schemas"]["Result"]["properties"]
        self.assertEqual(set(result["status"]["enum"]), documented)
        self.assertIn("compile", result, "a compiled language's result carries `compile`")
        self.assertEqual(set(result["compile"]["properties"]["status"]["enum"]), documented - {"compile_error"})

    def test_every_ref_resolves(self):
        found = list(refs(self.doc))
        self.assertGreater(len(found), 20)
        broken = []
        for where, ref in found:
            try:
                resolve(self.doc, ref)
            except (KeyError, TypeError):
                broken.append(f"{where}: {ref}")
        self.assertEqual(broken, [])

    def test_errors_streaming_files_and_auth_are_described(self):
        schemas = self.doc["components"]["schemas"]
        self.assertEqual(schemas["ErrorBody"]["required"], ["error"])
        self.assertEqual(set(schemas["Error"]["required"]), {"code", "message"})
        codes = set(schemas["Error"]["properties"]["code"]["enum"])
        self.assertEqual(codes, {"bad_request", "unauthorized", "forbidden", "not_found", "method_not_allowed",
                                 "conflict", "payload_too_large", "too_many_requests", "setup_failed", "internal",
                                 "unavailable"})
        exec_ok = self.doc["paths"]["/v1/sandboxes/{id}/exec"]["post"]["responses"]["200"]["content"]
        self.assertIn("application/x-ndjson", exec_ok)
        files = self.doc["paths"]["/v1/sandboxes/{id}/files"]
        self.assertIn("application/octet-stream", files["put"]["requestBody"]["content"])
        self.assertIn("application/octet-stream", files["get"]["responses"]["200"]["content"])
        scheme = self.doc["components"]["securitySchemes"]["bearerAuth"]
        self.assertEqual((scheme["type"], scheme["scheme"]), ("http", "bearer"))
        for path, item in self.doc["paths"].items():
            for method, op in item.items():
                if method == "parameters":
                    continue
                for status, resp in op["responses"].items():
                    if not status.startswith("2"):
                        target = resolve(self.doc, resp["$ref"]) if "$ref" in resp else resp
                        schema = target["content"]["application/json"]["schema"]
                        body = resolve(self.doc, schema["$ref"])
                        self.assertIn("error", body["properties"], f"{method} {path} {status}")

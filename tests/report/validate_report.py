#!/usr/bin/env python3
"""Checks report files the way their consumers read them.

  validate_report.py --schema data/report.schema.json --json r.json ... --junit r.xml ...
  validate_report.py --schema data/report.schema.json --dir tests/report/golden

JSON reports must validate against the schema (needs the jsonschema package: exit 77, the
CTest skip code, when it is missing and JSON files were given). JUnit files must parse with
xml.etree and have consistent counts. Exit 0 when every file passes, 1 otherwise.
"""
import argparse
import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

SKIP = 77


def check_junit(path):
    errors = []
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        return [f"root element is <{root.tag}>, expected <testsuites>"]
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    names = set()
    for suite in root.findall("testsuite"):
        name = suite.get("name")
        if not name:
            errors.append("a <testsuite> without a name")
        cases = suite.findall("testcase")
        counted = {
            "tests": len(cases),
            "failures": sum(1 for c in cases if c.find("failure") is not None),
            "errors": sum(1 for c in cases if c.find("error") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None),
        }
        for key, value in counted.items():
            if int(suite.get(key, "-1")) != value:
                errors.append(f"suite {name}: {key}={suite.get(key)} but {value} testcases say so")
            totals[key] += value
        float(suite.get("time", "0"))
        for c in cases:
            if not c.get("name") or not c.get("classname"):
                errors.append(f"suite {name}: a testcase without name or classname")
            key = (c.get("classname"), c.get("name"))
            if key in names:
                errors.append(f"duplicate testcase {key}")
            names.add(key)
            for child in c:
                if child.tag in ("failure", "error", "skipped") and child.get("message") is None:
                    errors.append(f"{key}: <{child.tag}> without a message")
    for key, value in totals.items():
        if int(root.get(key, "-1")) != value:
            errors.append(f"<testsuites> {key}={root.get(key)} but the suites add up to {value}")
    return errors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--schema", required=True)
    p.add_argument("--json", nargs="*", default=[])
    p.add_argument("--junit", nargs="*", default=[])
    p.add_argument("--dir", help="validate every *.json and *.junit.xml in DIR")
    args = p.parse_args()
    json_files, junit_files = list(args.json), list(args.junit)
    if args.dir:
        json_files += sorted(glob.glob(os.path.join(args.dir, "*.json")))
        junit_files += sorted(glob.glob(os.path.join(args.dir, "*.junit.xml")))
    if not json_files and not junit_files:
        print("no files to validate", file=sys.stderr)
        return 1

    failed = False
    for path in junit_files:
        try:
            errs = check_junit(path)
        except ET.ParseError as e:
            errs = [f"not well-formed XML: {e}"]
        for e in errs:
            print(f"{path}: {e}")
        failed |= bool(errs)
        if not errs:
            print(f"{path}: JUnit ok")

    if json_files:
        try:
            import jsonschema
        except ImportError:
            print("jsonschema is not installed: skipping the JSON schema check", file=sys.stderr)
            return 1 if failed else SKIP
        with open(args.schema, encoding="utf-8") as f:
            schema = json.load(f)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema)
        for path in json_files:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            errs = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
            for e in errs[:20]:
                where = "/".join(str(x) for x in e.absolute_path) or "(root)"
                print(f"{path}: {where}: {e.message}")
            failed |= bool(errs)
            if not errs:
                print(f"{path}: schema ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

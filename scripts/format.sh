#!/usr/bin/env bash
# Formats the tree, then lints it as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
swift format format --in-place --recursive Sources Tests Examples Package.swift
swift format lint --strict --recursive Sources Tests Examples Package.swift

import Foundation
import Testing

/// The code in the DocC articles is code the package compiles: the ```swift blocks of each
/// article `X.md` of Sources/Haul/Haul.docc are, in order and line for line (indentation
/// aside; each part between blank lines on its own), runs of lines of the part of
/// Examples/Snippets/main.swift under `// <doc:X>`, which `swift build` compiles against the
/// library. Code in doc comments is not checked here.
@Suite("DocC articles: their code is compiled")
struct DocCSnippetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    struct Unclosed: Error {}

    /// The ```swift blocks of `markdown`, each as its lines without indentation.
    static func blocks(_ markdown: String) throws -> [[String]] {
        var out: [[String]] = []
        var current: [String]?
        var inOther = false
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var block = current {
                if trimmed == "```" {
                    out.append(block)
                    current = nil
                } else {
                    block.append(trimmed)
                    current = block
                }
            } else if inOther {
                inOther = trimmed != "```"
            } else if trimmed == "```swift" {
                current = []
            } else if trimmed.hasPrefix("```") {
                inOther = true
            }
        }
        guard current == nil, !inOther else { throw Unclosed() }
        return out
    }

    /// The lines of `snippets` under each `// <doc:NAME>` marker, by NAME, indentation dropped.
    static func regions(_ snippets: String) -> [String: [String]] {
        var out: [String: [String]] = [:]
        var name: String?
        for line in snippets.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("// <doc:"), trimmed.hasSuffix(">") {
                name = String(trimmed.dropFirst(8).dropLast())
                out[name!] = []
            } else if let name {
                out[name]!.append(trimmed)
            }
        }
        return out
    }

    /// Whether every piece is a run of consecutive lines of `lines`, each after the one before.
    static func containsInOrder(_ lines: [String], _ pieces: [[String]]) -> Bool {
        var from = 0
        for piece in pieces {
            guard !piece.isEmpty, piece.count <= lines.count - from,
                let at = (from...(lines.count - piece.count)).first(where: {
                    Array(lines[$0..<$0 + piece.count]) == piece
                })
            else { return false }
            from = at + piece.count
        }
        return true
    }

    @Test func everyArticlesCodeIsInItsPartOfTheCompiledSnippets() throws {
        let catalog = Self.root.appendingPathComponent("Sources/Haul/Haul.docc")
        let regions = Self.regions(
            try String(contentsOf: Self.root.appendingPathComponent("Examples/Snippets/main.swift"), encoding: .utf8))
        let articles = (FileManager.default.enumerator(atPath: catalog.path)?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix(".md") }
        #expect(articles.count >= 11, "\(articles)")
        var withCode: Set<String> = []
        for path in articles {
            let name = String(path.split(separator: "/").last!.dropLast(3))
            let text = try String(contentsOf: catalog.appendingPathComponent(path), encoding: .utf8)
            let blocks = try Self.blocks(text)
            guard !blocks.isEmpty else { continue }
            withCode.insert(name)
            let pieces = blocks.flatMap { $0.split(separator: "", omittingEmptySubsequences: true).map(Array.init) }
            let region = regions[name] ?? []
            let found = Self.containsInOrder(region, pieces)
            #expect(found, "\(path): its code is not, in order, under // <doc:\(name)> in Examples/Snippets/main.swift")
        }
        #expect(withCode.count >= 10, "\(withCode)")
        #expect(
            Set(regions.keys).isSubset(of: withCode),
            "markers without an article: \(Set(regions.keys).subtracting(withCode))")
    }

    @Test func theCheckFindsWhatIsMissingOutOfOrderOrUnclosed() throws {
        let lines = ["a", "b", "c", "d"]
        #expect(Self.containsInOrder(lines, [["b", "c"]]))
        #expect(Self.containsInOrder(lines, [["a"], ["c", "d"]]))
        #expect(!Self.containsInOrder(lines, [["c"], ["a"]]))
        #expect(!Self.containsInOrder(lines, [["a", "c"]]))
        #expect(!Self.containsInOrder(lines, [["a", "b", "c", "d", "e"]]))
        #expect(try Self.blocks("x\n```swift\n  let a = 1\n```\n```sh\nls\n```\n") == [["let a = 1"]])
        #expect(throws: Unclosed.self) { try Self.blocks("```swift\nlet a = 1\n") }
        #expect(Self.regions("// <doc:A>\nx\n  y\n// <doc:B>\nz") == ["A": ["x", "y"], "B": ["z"]])
    }
}

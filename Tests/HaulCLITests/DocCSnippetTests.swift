import Foundation
import Testing

/// The code in the DocC articles is code the package compiles: every ```swift block of
/// Sources/Haul/Haul.docc is, line for line (indentation aside; each part between blank lines
/// on its own), a run of lines of Examples/Snippets/main.swift, which `swift build` compiles
/// against the library.
@Suite("DocC articles: their code is compiled")
struct DocCSnippetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The ```swift blocks of `markdown`, each as its lines without indentation.
    static func blocks(_ markdown: String) -> [[String]] {
        var out: [[String]] = []
        var current: [String]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil, trimmed == "```swift" {
                current = []
            } else if let block = current, trimmed == "```" {
                out.append(block)
                current = nil
            } else if current != nil {
                current!.append(trimmed)
            }
        }
        return out
    }

    /// Whether `block` is a run of consecutive lines of `lines`.
    static func contains(_ lines: [String], _ block: [String]) -> Bool {
        guard !block.isEmpty, block.count <= lines.count else { return false }
        return (0...(lines.count - block.count)).contains { Array(lines[$0..<$0 + block.count]) == block }
    }

    @Test func everyArticlesCodeIsInTheCompiledSnippets() throws {
        let catalog = Self.root.appendingPathComponent("Sources/Haul/Haul.docc")
        let snippets = try String(
            contentsOf: Self.root.appendingPathComponent("Examples/Snippets/main.swift"), encoding: .utf8
        )
        .split(separator: "\n", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let articles = try FileManager.default.contentsOfDirectory(atPath: catalog.path).filter { $0.hasSuffix(".md") }
        #expect(articles.count >= 11, "\(articles)")
        var checked = 0
        for name in articles {
            let text = try String(contentsOf: catalog.appendingPathComponent(name), encoding: .utf8)
            // A block may join pieces of two functions, at a blank line: each piece is a run.
            for block in Self.blocks(text) {
                for piece in block.split(separator: "", omittingEmptySubsequences: true).map(Array.init) {
                    checked += 1
                    let found = Self.contains(snippets, piece)
                    #expect(
                        found, "\(name): code not in Examples/Snippets/main.swift: \(piece.joined(separator: "\n"))")
                }
            }
        }
        #expect(checked >= 10)
    }

    @Test func aBlockThatIsNotThereIsFound() {
        let lines = ["a", "b", "c"]
        #expect(Self.contains(lines, ["b", "c"]))
        #expect(!Self.contains(lines, ["a", "c"]))
        #expect(!Self.contains(lines, ["a", "b", "c", "d"]))
        #expect(Self.blocks("x\n```swift\n  let a = 1\n```\n```sh\nls\n```\n") == [["let a = 1"]])
    }
}

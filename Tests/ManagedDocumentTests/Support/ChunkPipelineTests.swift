import Crypto
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

@Suite("SHA-256 on a second thread")
struct ChunkPipelineTests {
    @Test("chunks of every size hash to the SHA-256 of the whole, and the pipeline starts over after finalize")
    func hashesInOrder() {
        var generator = SeededGenerator(seed: 3)
        let pipeline = ChunkPipeline(buffers: 3, size: 4096)
        for _ in 0..<3 {
            var whole: [UInt8] = []
            for _ in 0..<50 {
                let buffer = pipeline.acquire()
                let count = Int.random(in: 0...4096, using: &generator)
                for index in 0..<count { buffer[index] = UInt8.random(in: 0...255, using: &generator) }
                whole.append(contentsOf: buffer[0..<count])
                pipeline.submit(count)
            }
            #expect(pipeline.finalize() == SHA256.hash(data: whole).hexString)
        }
    }

    @Test("a pipeline abandoned with a buffer in hand (an error mid-stream) is released cleanly")
    func abandoned() async throws {
        for _ in 0..<20 {
            weak var released: ChunkPipeline?
            do {
                let pipeline = ChunkPipeline(buffers: 2, size: 1024)
                released = pipeline
                _ = pipeline.acquire()
                pipeline.submit(1024)
                _ = pipeline.acquire()
            }
            // > Abandoned mid-stream: nothing (its hashing thread included) keeps it alive.
            let deadline = ContinuousClock.now + .seconds(2)
            while released != nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            #expect(released == nil, "an abandoned pipeline is released")
        }
        // A new pipeline after all those still hashes correctly.
        let pipeline = ChunkPipeline(buffers: 2, size: 1024)
        let buffer = pipeline.acquire()
        for index in 0..<100 { buffer[index] = UInt8(index) }
        pipeline.submit(100)
        #expect(pipeline.finalize() == SHA256.hash(data: (0..<100).map { UInt8($0) }).hexString)
    }
}

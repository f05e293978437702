"""Codebase retrieval: parsing (languages, chunking, tags, repo map), embeddings and the index.

    from agent.retrieval.chunking import chunk_text
    from agent.retrieval.tags import file_tags
    from agent.retrieval.repomap import repo_map
"""

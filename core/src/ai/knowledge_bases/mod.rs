//! Knowledge bases in SQL: their statements and INSERT INTO one (`statements`), the table
//! provider a knowledge base's name resolves to (`table`), how a search ranks (`search`) and
//! how documents are chunked, embedded and stored (`write`). The records and the vector
//! index are `catalog::knowledge_bases` and `catalog::kb_index`.

pub(crate) mod search;
pub(crate) mod statements;
pub(crate) mod table;
pub(crate) mod write;

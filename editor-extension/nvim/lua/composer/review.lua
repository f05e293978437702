-- The proposal review of a revisable `session/request_permission` (:help composer-review): a tab
-- with the file's current text (`composer://current/<file>`, read-only) beside the proposed new
-- text (`composer://proposal/<file>`) in diff mode. The proposal is a buffer like any other: edit
-- it, then `:w` accepts it as it stands; closing it unwritten gives the review up.

local Review = {}
local H = {}

--- Opens the review of `diff` (a tool call's content item: { path, oldText, newText }) and calls
--- `on_done(text)` once: with the proposal's whole text when the person writes it, or with nil
--- when they close it unwritten. Buffer names are relative to `root` where the file is under it.
---@param diff { path: string, oldText: string?, newText: string }
---@param root? string
---@param on_done fun(text: string?)
function Review.open(diff, root, on_done)
  local name = root and vim.fs.relpath(root, diff.path) or vim.fn.fnamemodify(diff.path, ':~:.')
  -- oldText is JSON null (vim.NIL) for a new file: the proposal is then diffed against nothing.
  local old = type(diff.oldText) == 'string' and diff.oldText or ''
  local current = H.scratch('composer://current/' .. name, old)
  vim.bo[current].modifiable = false
  local proposal = H.scratch('composer://proposal/' .. name, diff.newText)
  -- acwrite: `:w` runs the BufWriteCmd below instead of writing a file, and a changed proposal
  -- is not closed by a plain `:q` (E37), so edits are not dropped by accident.
  vim.bo[proposal].buftype = 'acwrite'
  vim.bo[proposal].modified = false
  local filetype = vim.filetype.match({ buf = proposal, filename = diff.path }) or ''
  for _, buf in ipairs({ current, proposal }) do
    vim.bo[buf].filetype = filetype
  end

  local from = vim.api.nvim_get_current_tabpage()
  vim.cmd('tab sbuffer ' .. current)
  vim.cmd.diffthis()
  vim.cmd('vertical rightbelow sbuffer ' .. proposal)
  vim.cmd.diffthis()

  local finished = false
  local function finish(text)
    if finished then
      return
    end
    finished = true
    -- Scheduled: `:wq` still closes a window after its write, and closing the review's windows
    -- under it would make that another window (the last one would quit Neovim).
    vim.schedule(function()
      H.close({ current, proposal }, from)
      on_done(text)
    end)
  end
  vim.api.nvim_create_autocmd('BufWriteCmd', {
    buffer = proposal,
    desc = 'Composer: accept the proposal as it stands',
    callback = function()
      vim.bo[proposal].modified = false
      finish(H.text(proposal, diff.newText))
    end,
  })
  -- bufhidden=wipe (H.scratch): every way of closing the proposal ends here.
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = proposal,
    once = true,
    callback = function()
      finish(nil)
    end,
  })
end

--- A buffer named `name` holding `text`, wiped when no window shows it.
function H.scratch(name, text)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].bufhidden = 'wipe'
  -- No undo for the filling itself: `u` must not empty the proposal.
  local undolevels = vim.bo[buf].undolevels
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, H.lines(text))
  vim.bo[buf].undolevels = undolevels
  return buf
end

--- The lines of `text`; a final newline ends the last line rather than starting an empty one.
---@param text string
---@return string[]
function H.lines(text)
  local lines = vim.split(text, '\n', { plain = true })
  if #lines > 1 and lines[#lines] == '' then
    table.remove(lines)
  end
  return lines
end

--- The text of `buf`, ending with a newline where `like` (the proposal's newText) does: a buffer's
--- lines do not say, and a person editing lines does not mean to add or drop the final newline.
---@param buf integer
---@param like string
---@return string
function H.text(buf, like)
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  return vim.endswith(like, '\n') and text .. '\n' or text
end

--- Wipes the review's buffers (which closes their windows, and so the tab) and goes back to the
--- tab the review came from.
---@param bufs integer[]
---@param from integer
function H.close(bufs, from)
  for _, buf in ipairs(bufs) do
    if vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end
  if vim.api.nvim_tabpage_is_valid(from) then
    vim.api.nvim_set_current_tabpage(from)
  end
end

return Review
